"""Schedules: Temporal Schedules whose every firing starts a new one-turn Keel session.

A schedule ``NAME`` starts ``AgentSession`` with the workflow id ``NAME``; Temporal appends
the firing's scheduled time, so each job's session id is ``NAME-<time, ISO 8601 UTC>``
(``nightly-2026-12-01T02:00:00Z``), and every ``keel`` command takes it as it is. The session
starts with the prompt in its start input (``SessionInput.prompt``) and ``single_turn``: it
closes once that turn ends (after an approval, if one is needed), which is what lets the
overlap policy see a job as finished. Temporal marks each such workflow with the search
attribute ``TemporalScheduledById`` (the schedule's id), which ``keel sessions`` shows.

The schedule's memo ``keel_task_queue`` names the task queue its sessions run on (listings
show only the schedules of this client's queue), and ``keel_spec`` when it fires, as given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeVar

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributeKey, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from keel.worker.client.errors import RequestRejected, ScheduleNotFound
from keel.worker.client.status_attribute import start_attributes
from keel.workflows.boundary import InputRejected, validate_prompt
from keel.workflows.contracts import SessionConfig
from keel.workflows.cycle import text_of
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import Message, text_block
from keel.workflows.session import AgentSession

T = TypeVar("T")
Overlap = Literal["skip", "allow", "buffer"]
OVERLAP_POLICIES: dict[Overlap, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "allow": ScheduleOverlapPolicy.ALLOW_ALL,
    "buffer": ScheduleOverlapPolicy.BUFFER_ONE,
}
_OVERLAP_NAMES = {policy: name for name, policy in OVERLAP_POLICIES.items()}
# Temporal's own search attribute on a workflow a schedule started: the schedule's id.
SCHEDULED_BY = SearchAttributeKey.for_keyword("TemporalScheduledById")
TASK_QUEUE_MEMO = "keel_task_queue"
# The spec as it was given (``cron 0 2 * * *``): Temporal answers with calendars instead.
SPEC_MEMO = "keel_spec"


@dataclass(frozen=True)
class ScheduleSummary:
    """A schedule as ``keel schedule list`` and ``describe`` show it.

    Attributes:
        name: the schedule's name (its id, and the prefix of its sessions' ids).
        spec: when it fires, in words (``cron 0 2 * * *``, ``every 3600s``).
        paused: whether it is paused.
        note: the note of its last pause or unpause.
        next_runs: its next firing times.
        recent: its recent firings: (scheduled time, session id), oldest first.
        running: sessions it started that still run (``describe`` only).
        overlap: ``skip``, ``allow`` or ``buffer`` (``describe`` only).
        prompt: what each session is sent (``describe`` only).
        model: the sessions' model (``describe`` only).
        fired: how many firings started a session (``describe`` only).
        skipped: how many firings the overlap policy skipped (``describe`` only).
    """

    name: str
    spec: str
    paused: bool
    note: str
    next_runs: list[datetime]
    recent: list[tuple[datetime, str]]
    running: list[str] | None = None
    overlap: str | None = None
    prompt: str | None = None
    model: str | None = None
    fired: int | None = None
    skipped: int | None = None


def describe_spec(spec: ScheduleSpec) -> str:
    """When a schedule fires, in words."""
    parts = [f"cron {c}" for c in spec.cron_expressions]
    parts += [f"every {_seconds(i.every)}" for i in spec.intervals]
    # the server answers with cron expressions turned into calendars
    parts += [f"calendar {c.comment or _calendar(c)}" for c in spec.calendars]
    where = f" ({spec.time_zone_name})" if spec.time_zone_name else ""
    return (", ".join(parts) or "never (no spec)") + where


def _seconds(every: timedelta) -> str:
    total = int(every.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size and total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}s"


def _calendar(calendar: object) -> str:
    fields = ("second", "minute", "hour", "day_of_month", "month", "day_of_week")
    return " ".join(",".join(_range(r) for r in getattr(calendar, f, ())) or "*" for f in fields)


def _range(r: object) -> str:
    start, end, step = getattr(r, "start", 0), getattr(r, "end", 0), getattr(r, "step", 1)
    text = str(start) if end in (0, start) else f"{start}-{end}"
    return text + (f"/{step}" if step not in (0, 1) else "")


class KeelSchedules:
    """Creates and manages Keel's schedules on one task queue.

    Example:
        >>> schedules = KeelSchedules(client, "keel")
        >>> await schedules.create("nightly", "Tidy the workspace", config, cron="0 2 * * *")
    """

    def __init__(self, client: Client, task_queue: str) -> None:
        """Wrap a client made by ``keel.worker.process.assembly.connect``."""
        self.client = client
        self.task_queue = task_queue

    async def create(
        self,
        name: str,
        prompt: str,
        config: SessionConfig,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        overlap: Overlap = "skip",
        time_zone: str | None = None,
        messages: Sequence[Message] = (),
    ) -> ScheduleHandle:
        """Create a schedule; each firing starts a session ``NAME-<time>`` sent ``prompt``.

        Args:
            name: the schedule's name.
            prompt: the prompt every session gets.
            config: the sessions' ``SessionConfig``.
            cron: a cron expression (``0 2 * * *``); or
            every: an interval.
            overlap: what a firing does while the previous session still runs: ``skip`` it,
                ``allow`` both, or ``buffer`` one firing until the running one ends.
            time_zone: IANA time zone of the cron expression (default UTC).
            messages: history each session starts with.

        Raises:
            RequestRejected: the schedule exists, the prompt is refused, or Temporal refuses
                the spec (a malformed cron expression, say).
        """
        content = [text_block(prompt)]
        try:
            validate_prompt("user", content)
        except InputRejected as err:
            raise RequestRejected(str(err)) from err
        start = SessionInput(
            config=config,
            messages=list(messages),
            prompt=content,
            single_turn=True,
        )
        action = ScheduleActionStartWorkflow(
            AgentSession.run,
            start,
            id=name,
            task_queue=self.task_queue,
            # KeelStatus when the namespace has it now (each firing's session keeps it)
            typed_search_attributes=(
                await start_attributes(self.client) or TypedSearchAttributes.empty
            ),
        )
        spec = ScheduleSpec(
            cron_expressions=[cron] if cron else [],
            intervals=[ScheduleIntervalSpec(every=every)] if every else [],
            time_zone_name=time_zone,
        )
        schedule = Schedule(
            action=action,
            spec=spec,
            policy=SchedulePolicy(overlap=OVERLAP_POLICIES[overlap]),
            state=ScheduleState(note=f"created by keel schedule create {name}"),
        )
        memo = {TASK_QUEUE_MEMO: self.task_queue, SPEC_MEMO: describe_spec(spec)}
        try:
            return await self.client.create_schedule(name, schedule, memo=memo)
        except ScheduleAlreadyRunningError as err:
            raise RequestRejected(f"schedule {name!r} exists already") from err
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise RequestRejected(f"Temporal refused schedule {name!r}: {err.message}") from err
            raise

    async def list(self) -> list[ScheduleSummary]:
        """The schedules that start sessions on this task queue, by name.

        Visibility is eventually consistent: a schedule created a moment ago may be missing.
        """
        found = []
        async for entry in await self.client.list_schedules():
            schedule, info = entry.schedule, entry.info
            if schedule is None or info is None:  # a schedule being created or deleted
                continue
            action = schedule.action
            if not isinstance(action, ScheduleListActionStartWorkflow):
                continue
            if action.workflow != "AgentSession":
                continue
            memo = await entry.memo()
            if memo.get(TASK_QUEUE_MEMO, self.task_queue) != self.task_queue:
                continue
            found.append(
                ScheduleSummary(
                    name=entry.id,
                    spec=str(memo.get(SPEC_MEMO) or describe_spec(schedule.spec)),
                    paused=schedule.state.paused,
                    note=schedule.state.note or "",
                    next_runs=list(info.next_action_times),
                    recent=[(r.scheduled_at, _session_of(r.action)) for r in info.recent_actions],
                )
            )
        return sorted(found, key=lambda s: s.name)

    async def describe(self, name: str) -> ScheduleSummary:
        """One schedule, with its running sessions, prompt and counts.

        Raises:
            ScheduleNotFound: no such schedule.
        """
        description = await self._call(name, self.handle(name).describe())
        return await self._summary(description)

    async def pause(self, name: str, note: str | None = None) -> None:
        """Pause a schedule: it fires no more until unpaused.

        Raises:
            ScheduleNotFound: no such schedule.
        """
        await self._call(name, self.handle(name).pause(note=note or "paused by keel"))

    async def unpause(self, name: str, note: str | None = None) -> None:
        """Let a paused schedule fire again.

        Raises:
            ScheduleNotFound: no such schedule.
        """
        await self._call(name, self.handle(name).unpause(note=note or "unpaused by keel"))

    async def trigger(self, name: str, overlap: Overlap | None = None) -> None:
        """Fire now, under the schedule's overlap policy unless ``overlap`` is given.

        Raises:
            ScheduleNotFound: no such schedule.
        """
        policy = OVERLAP_POLICIES[overlap] if overlap else None
        await self._call(name, self.handle(name).trigger(overlap=policy))

    async def delete(self, name: str) -> None:
        """Delete a schedule; the sessions it started go on.

        Raises:
            ScheduleNotFound: no such schedule.
        """
        await self._call(name, self.handle(name).delete())

    def handle(self, name: str) -> ScheduleHandle:
        """The Temporal handle of a schedule."""
        return self.client.get_schedule_handle(name)

    async def _call(self, name: str, call: Awaitable[T]) -> T:
        """Await a call on a schedule, a missing schedule as ``ScheduleNotFound``."""
        try:
            return await call
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(f"no schedule {name!r}") from err
            raise

    async def _summary(self, description: ScheduleDescription) -> ScheduleSummary:
        schedule, info = description.schedule, description.info
        prompt = model = None
        action = schedule.action
        if isinstance(action, ScheduleActionStartWorkflow) and action.args:
            [start] = await self.client.data_converter.decode(list(action.args), [SessionInput])
            if isinstance(start, SessionInput):
                model = start.config.model
                prompt = text_of(Message(role="user", content=start.prompt or []))
        overlap = schedule.policy.overlap
        memo = await description.memo()
        return ScheduleSummary(
            name=description.id,
            spec=str(memo.get(SPEC_MEMO) or describe_spec(schedule.spec)),
            paused=schedule.state.paused,
            note=schedule.state.note or "",
            next_runs=list(info.next_action_times),
            recent=[(r.scheduled_at, _session_of(r.action)) for r in info.recent_actions],
            running=[_session_of(r) for r in info.running_actions],
            overlap=_OVERLAP_NAMES.get(overlap, overlap.name.lower()),
            prompt=prompt,
            model=model,
            fired=info.num_actions,
            skipped=info.num_actions_skipped_overlap,
        )


def _session_of(action: object) -> str:
    return str(getattr(action, "workflow_id", "?"))
