"""The pre-deploy check: replay open sessions' histories against the code installed here.

A release whose workflow code makes different decisions from the code that wrote a session's
history breaks that session the next time a worker of the release replays it (a
non-determinism error, the session stuck until the code is fixed). ``check_sessions`` finds
out before the rollout: it lists the sessions (``AgentSession`` workflows, open by default),
fetches their histories from Temporal and replays each with ``temporalio``'s ``Replayer`` as
a Keel worker would run it (``keel.worker.process.plugin.replayer``: the same sandbox,
interceptors and data converter, encrypted payloads decoded with the keys given). Histories
are fetched and replayed in several lanes at once; each session comes out ``ok``,
``breaks`` (with the first command that does not match its history) or ``error`` (the
history could not be read or replayed, e.g. a payload no key here decrypts). Given a
``DriftCheck``, the same histories are also compared with the tools and agent file installed
here (``keel.worker.process.drift``): each check then lists its drift.

``keel deploy check`` is this function, run from the new release's installation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

from keel.activities.store.encrypted import Keyring
from keel.worker.payloads import data_converter
from keel.worker.process.drift import Drift, DriftCheck, Recorded, read_recorded
from keel.worker.process.plugin import replayer
from keel.workflows.session import AgentSession

DEFAULT_QUERY = 'ExecutionStatus="Running"'
# replayers at once: each lane fetches a history while the others replay theirs
DEFAULT_LANES = 4
Outcome = Literal["ok", "breaks", "error"]
# core's report wraps the mismatch: ``... Failure { message: "[TMPRL1100] Nondeterminism
# error: Timer machine does not handle this event: HistoryEvent(id: 7, ...)", ... }``
_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_NOISE = re.compile(r"^(?:\[TMPRL\d+\]\s*)?(?:Nondeterminism error:\s*)?", re.I)


@dataclass(frozen=True)
class SessionCheck:
    """What replaying one session's history against the installed code gave.

    Attributes:
        session_id: the session (workflow id).
        run_id: the run whose history was replayed.
        outcome: ``ok``; ``breaks``: the installed code is not deterministic against it;
            ``error``: the history could not be fetched, decoded or replayed.
        detail: for ``breaks``, the first mismatch Temporal's replay reports (which command
            the code gave where the history has another event); for ``error``, what failed.
        drift: what the session recorded that differs from the tools and agent file installed
            here (empty when drift was not checked, or the history could not be read).
    """

    session_id: str
    run_id: str
    outcome: Outcome
    detail: str | None = None
    drift: tuple[Drift, ...] = ()

    @property
    def drifted(self) -> bool:
        """Whether any of its drift counts (not only ``info``)."""
        return any(d.level == "drift" for d in self.drift)


@dataclass(frozen=True)
class CheckReport:
    """Every session checked, in listing order, and how long it took."""

    checks: Sequence[SessionCheck]
    seconds: float

    @property
    def failing(self) -> list[SessionCheck]:
        """The sessions this release would break, or that could not be checked."""
        return [c for c in self.checks if c.outcome != "ok"]

    @property
    def drifted(self) -> list[SessionCheck]:
        """The sessions with drift (``info`` alone does not count)."""
        return [c for c in self.checks if c.drifted]


def workflow_name(cls: type) -> str:
    """The workflow type name of a ``@workflow.defn`` class.

    Raises:
        ValueError: the class is not a workflow definition.
    """
    defn = workflow._Definition.from_class(cls)
    if defn is None or defn.name is None:
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} is not a @workflow.defn class")
    return defn.name


def sessions_query(
    names: Sequence[str],
    query: str | None = DEFAULT_QUERY,
    *,
    task_queue: str | None = None,
    deployment: str | None = None,
) -> str:
    """The visibility query of the workflows to check.

    Args:
        names: their workflow types.
        query: a visibility query they must also match.
        task_queue: only those of this task queue.
        deployment: only those of this Worker Deployment (any of its versions).
    """
    quoted = ", ".join(_literal(n) for n in names)
    parts = [f"WorkflowType = {quoted}" if len(names) == 1 else f"WorkflowType IN ({quoted})"]
    if task_queue:
        parts.append(f"TaskQueue = {_literal(task_queue)}")
    if deployment:
        parts.append(f"TemporalWorkerDeployment = {_literal(deployment)}")
    if query:
        parts.append(f"({query})")
    return " AND ".join(parts)


def _literal(text: str) -> str:
    """A string literal of Temporal's visibility query language."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def check_sessions(
    client: Client,
    *,
    workflows: Sequence[type] = (AgentSession,),
    query: str | None = DEFAULT_QUERY,
    limit: int | None = None,
    keyring: Keyring | None = None,
    lanes: int = DEFAULT_LANES,
    on_progress: Callable[[int, int], None] | None = None,
    task_queue: str | None = None,
    deployment: str | None = None,
    drift: DriftCheck | None = None,
) -> CheckReport:
    """Replay the histories of the sessions ``query`` finds against ``workflows``.

    Args:
        client: the Temporal client (its namespace is the one checked).
        workflows: the workflow classes of the release (default Keel's ``AgentSession``);
            the executions listed are those of their types.
        query: a visibility query added to the type (default: the running ones); None:
            every execution of those types.
        limit: check at most this many (the newest first, as Temporal lists them).
        keyring: the keys that decrypt the histories' payloads.
        lanes: how many replayers run at once.
        on_progress: called with (done, total) as sessions are checked, and once before.
        task_queue: only the sessions of this task queue.
        deployment: only the sessions of this Worker Deployment.
        drift: compare what each session recorded with the tools and agent file installed
            here; None: replay only.

    Raises:
        RPCError: the listing failed (e.g. a malformed query).
    """
    started = time.monotonic()
    names = [workflow_name(cls) for cls in workflows]
    executions = [
        (e.id, e.run_id)
        async for e in client.list_workflows(
            sessions_query(names, query, task_queue=task_queue, deployment=deployment),
            limit=limit,
        )
    ]
    converter = data_converter(keyring)
    recordings: dict[tuple[str, str], Recorded | str] = {}
    total, done = len(executions), 0
    if on_progress is not None:
        on_progress(0, total)
    results: dict[tuple[str, str], SessionCheck] = {}
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for execution in executions:
        queue.put_nowait(execution)

    def record(check: SessionCheck) -> None:
        nonlocal done
        results[(check.session_id, check.run_id)] = check
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    async def histories(fed: deque[tuple[str, str]]) -> AsyncIterator[WorkflowHistory]:
        while not queue.empty():
            session_id, run_id = queue.get_nowait()
            try:
                handle = client.get_workflow_handle(session_id, run_id=run_id)
                history = await handle.fetch_history()
            except RPCError as err:
                record(SessionCheck(session_id, run_id, "error", f"history: {err.message}"))
                continue
            if drift is not None:
                recordings[(session_id, run_id)] = await _recorded(history, converter)
            fed.append((session_id, run_id))
            yield history

    runtime = _quiet_runtime()

    async def lane() -> None:
        fed: deque[tuple[str, str]] = deque()  # what this lane's replayer was given, in order
        replay = replayer(workflows, keyring=keyring, namespace=client.namespace, runtime=runtime)
        async with replay.workflow_replay_iterator(histories(fed)) as replayed:
            async for result in replayed:
                key = fed.popleft()
                check = _check(key, result.replay_failure)
                recorded = recordings.pop(key, None)
                if drift is not None and recorded is not None and check.outcome != "error":
                    check = await _with_drift(check, recorded, drift)
                record(check)

    if executions:
        await asyncio.gather(*(lane() for _ in range(max(1, min(lanes, total)))))
    ordered = [results[e] for e in executions if e in results]
    return CheckReport(ordered, time.monotonic() - started)


async def _recorded(history: WorkflowHistory, converter: DataConverter) -> Recorded | str:
    """What the history recorded, or why it could not be read."""
    try:
        return await read_recorded(history, converter)
    except Exception as err:  # noqa: BLE001 - any failure is reported on its session
        return replay_error(f"{type(err).__name__}: {err}")


async def _with_drift(
    check: SessionCheck, recorded: Recorded | str, drift: DriftCheck
) -> SessionCheck:
    """The check with its session's drift."""
    if isinstance(recorded, str):
        found = [Drift("unreadable", None, recorded)]
    else:
        try:
            found = await drift.drift_of(recorded)
        except Exception as err:  # noqa: BLE001 - a hostile history must not stop the check
            found = [Drift("unreadable", None, _one_line(f"{type(err).__name__}: {err}"))]
    return dataclasses.replace(check, drift=tuple(found))


def _quiet_runtime() -> Runtime:
    """A runtime whose core logs only errors: each failed replay is reported here, once."""
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))


def _check(key: tuple[str, str], failure: Exception | None) -> SessionCheck:
    session_id, run_id = key
    if failure is None:
        return SessionCheck(session_id, run_id, "ok")
    if isinstance(failure, workflow.NondeterminismError):
        return SessionCheck(session_id, run_id, "breaks", first_mismatch(str(failure)))
    return SessionCheck(session_id, run_id, "error", replay_error(str(failure)))


def first_mismatch(message: str) -> str:
    """The first mismatch in a replay's non-determinism message, on one line.

    Example: ``Timer machine does not handle this event: HistoryEvent(id: 7,
    ActivityTaskScheduled)``: the code started a timer where event 7 of the history
    schedules an activity.
    """
    found = _CORE_MESSAGE.search(message)
    inner = found.group(1).replace('\\"', '"') if found else message
    return _one_line(_NOISE.sub("", inner.strip()))


def replay_error(message: str) -> str:
    """What made a replay fail other than non-determinism, on one line.

    Core's messages, outermost first, without their stack traces: ``a Temporal payload is
    encrypted with key ..., and this process has no key``.
    """
    found = [m.replace('\\"', '"') for m in _CORE_MESSAGE.findall(message)]
    text = ": ".join(dict.fromkeys(m.strip() for m in found if m.strip())) or message
    return _one_line(text)


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
