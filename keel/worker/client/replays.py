"""The replaying part of the Python API: a session's recording as a case, replayed or forked.

``SessionReplays`` is a ``SessionWriter`` that also:

- ``export_case``: a session's recording as one self-contained ``ReplayCase`` (the JSON file
  ``keel export`` writes): its imported history, its turns' prompts, tool calls with their
  results and answers, its settings, and an ``expect`` block a user may fill;
- ``replay``: runs a case's prompts again, turn by turn, in a new session with another model
  or configuration, its tool calls answered from the recording (``keel.workflows.replaying``):
  no tool runs; the report says where the new model departs from the recording;
- ``fork``: a new session whose conversation is a session's first N messages, running nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keel.worker.client.errors import RequestRejected
from keel.worker.client.recording import RecordedTurn, recorded_turns
from keel.worker.client.writing import SessionWriter, check_config
from keel.workflows.contracts import SessionConfig
from keel.workflows.ledger import SessionInput
from keel.workflows.limits import MAX_START_BYTES
from keel.workflows.messages import Message, TokenUsage, ToolUse, tool_uses
from keel.workflows.replay_contracts import REPLAY_DIVERGED, Divergence, ReplayPlan

CASE_FORMAT: Literal[1] = 1


class CaseExpectation(BaseModel):
    """What a case's replay must do besides not diverging (``keel eval``); all optional.

    Attributes:
        answer_contains: texts the last turn's answer must contain.
        answer_matches: regular expressions (Python's ``re.search``) it must match.
        tools_called: tools the replay must call (in any turn).
        output_schema: a JSON Schema the last turn's structured output must be valid for.
    """

    model_config = ConfigDict(extra="forbid")

    answer_contains: list[str] = Field(default_factory=list)
    answer_matches: list[str] = Field(default_factory=list)
    tools_called: list[str] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = None


class ReplayCase(BaseModel):
    """A recorded session as one self-contained case (``keel export``'s file).

    Attributes:
        keel_case: the format's version.
        name: the case's name (default: the session's id).
        session: the recorded session's id.
        exported_at: when it was exported (ISO 8601, UTC).
        settings: the session's configuration.
        messages: the imported history before the first turn.
        turns: the recorded turns.
        usage: the recorded session's tokens.
        expect: what a replay must also do (filled by a user).
    """

    model_config = ConfigDict(extra="forbid")

    keel_case: Literal[1] = CASE_FORMAT
    name: str
    session: str | None = None
    exported_at: str | None = None
    settings: SessionConfig
    messages: list[Message] = Field(default_factory=list)
    turns: list[RecordedTurn] = Field(default_factory=list)
    usage: TokenUsage | None = None
    expect: CaseExpectation | None = None


class TurnReplay(BaseModel):
    """One turn, as recorded and as replayed."""

    turn: int
    recorded_answer: str
    replayed_answer: str | None = None
    recorded_calls: list[ToolUse] = Field(default_factory=list)
    replayed_calls: list[ToolUse] = Field(default_factory=list)
    status: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    output: Any = None
    usage: TokenUsage | None = None
    seconds: float = 0.0


class ReplayReport(BaseModel):
    """What a replay found (``keel replay --json``).

    Attributes:
        session: the recorded session (or the case's name).
        replay_session: the session the replay ran in.
        turns: the turns replayed, in order; a replay stops at the turn that diverged.
        diverged: whether a call matched no recorded call.
        divergence: where, or None.
        stopped: why the replay stopped before the recording's last turn without
            diverging (a turn that failed or waited for a person), else None.
        recorded_usage: the recording's tokens; replayed_usage: the replay's.
        seconds: the replay's wall time.
    """

    session: str
    replay_session: str
    turns: list[TurnReplay] = Field(default_factory=list)
    diverged: bool = False
    divergence: Divergence | None = None
    stopped: str | None = None
    recorded_usage: TokenUsage | None = None
    replayed_usage: TokenUsage = Field(default_factory=TokenUsage)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The report as ``keel replay --json`` prints it."""
        divergence = None
        if self.divergence is not None:
            d = self.divergence
            divergence = {
                "turn": d.turn,
                "index": d.index,
                "recorded": _use_json(d.recorded),
                "replayed": _use_json(d.replayed),
            }
        return {
            "session": self.session,
            "replay_session": self.replay_session,
            "turns": len(self.turns),
            "diverged": self.diverged,
            "divergence": divergence,
            "stopped": self.stopped,
            "answers": [
                {"turn": t.turn, "recorded": t.recorded_answer, "replayed": t.replayed_answer}
                for t in self.turns
            ],
            "calls": [
                {
                    "turn": t.turn,
                    "recorded": [_use_json(u) for u in t.recorded_calls],
                    "replayed": [_use_json(u) for u in t.replayed_calls],
                }
                for t in self.turns
            ],
            "usage": {
                "recorded": _usage_json(self.recorded_usage),
                "replayed": _usage_json(self.replayed_usage),
            },
            "seconds": round(self.seconds, 3),
        }


class SessionReplays(SessionWriter):
    """Export, replay and fork sessions (``keel export``, ``keel replay``, ``keel eval``)."""

    async def export_case(self, session_id: str, *, name: str | None = None) -> ReplayCase:
        """A session's recording as one self-contained case.

        Raises:
            SessionNotFound: no such session.
            StoreError: a message or tool result cannot be read from the store.
        """
        state = await self.state(session_id)
        imported, turns = recorded_turns(state)
        return ReplayCase(
            name=name or session_id,
            session=session_id,
            exported_at=datetime.now(UTC).isoformat(timespec="seconds"),
            settings=state.config,
            messages=imported,
            turns=turns,
            usage=state.usage,
        )

    async def replay(
        self,
        case: ReplayCase | str,
        *,
        model: str | None = None,
        config: SessionConfig | None = None,
        system: str | None = None,
        live_read: bool = False,
        replay_session: str | None = None,
        turn_timeout_s: float | None = None,
        task_queue: str | None = None,
    ) -> ReplayReport:
        """Run a recording's prompts again in a new session; no tool runs.

        Args:
            case: a case (``export_case``, a file ``keel export`` wrote) or a session id.
            model: the model spec to replay with (default: the recording's).
            config: the settings to replay with instead of the recording's (an agent file).
            system: the system prompt to replay with.
            live_read: let a ``read`` tool run live when its call matches no recorded one.
            replay_session: the new session's id (default ``<session>/replay-<hex>``).
            turn_timeout_s: give up on a turn after this long.
            task_queue: the replay session's task queue (default: the recorded session's
                when ``case`` is a session id, else this client's).

        Returns:
            The report: answers and calls turn by turn, and the divergence if any.

        Raises:
            RequestRejected: the settings or the recording were refused (too big, say).
            TimeoutError: a turn did not end within ``turn_timeout_s`` (the replay session
                is closed).
        """
        if isinstance(case, str):
            task_queue = task_queue or await self.session_task_queue(case)
            case = await self.export_case(case)
        settings = replay_config(case, model=model, config=config, system=system)
        settings.replay = ReplayPlan(
            source=case.session or case.name,
            turns=[t.calls for t in case.turns],
            live_read=live_read,
        )
        replay_id = replay_session or f"{case.session or case.name}/replay-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        await self._start_replay(replay_id, settings, case.messages, task_queue)
        report = ReplayReport(
            session=case.session or case.name,
            replay_session=replay_id,
            recorded_usage=case.usage,
        )
        try:
            for recorded in case.turns:
                if not await self._replay_turn(replay_id, recorded, report, turn_timeout_s):
                    break
        finally:
            await self.close(replay_id, reason="replay finished", now=True)
        await self._read_replay(replay_id, report)
        report.seconds = time.monotonic() - started
        return report

    async def fork(
        self, session_id: str, at: int, *, new_session: str | None = None, **changes: Any
    ) -> str:
        """A new session whose conversation is the session's first ``at`` messages.

        Nothing runs: the new session waits for its first prompt. It keeps the session's
        settings (approvers, keys, gated tools ...) but for ``changes`` (``SessionConfig``
        fields), and runs on its task queue (its workers have its tools); the session itself
        is not changed.

        Raises:
            RequestRejected: ``at`` is out of range, or would leave a toolUse without its
                toolResult (naming the message), or the new session exists already.
        """
        state = await self.state(session_id)
        messages = state.messages
        if not 1 <= at <= len(messages):
            raise RequestRejected(
                f"--at {at} is out of range: session {session_id!r} has {len(messages)} "
                "message(s); give 1 to that many"
            )
        last = messages[at - 1]
        if last.role == "assistant" and tool_uses(last):
            names = ", ".join(u.name for u in tool_uses(last))
            raise RequestRejected(
                f"--at {at} would end on message {at} (an assistant message), whose tool "
                f"use(s) ({names}) would have no result; fork at {at - 1} or {at + 1}"
            )
        config = state.config.model_copy(update={**changes, "replay": None})
        fork_id = new_session or f"{session_id}/fork-{uuid.uuid4().hex[:8]}"
        queue = await self.session_task_queue(session_id)
        await self._start_replay(fork_id, config, messages[:at], queue)
        return fork_id

    # ----------------------------------------------------------------------------- inside

    async def _start_replay(
        self,
        session_id: str,
        config: SessionConfig,
        messages: list[Message],
        task_queue: str | None = None,
    ) -> None:
        """Start a session with an imported conversation and no prompt (on ``task_queue``)."""
        check_config(config)
        start = SessionInput(config=config, messages=messages)
        size = len(start.model_dump_json(exclude_defaults=True))
        if size > MAX_START_BYTES:
            raise RequestRejected(
                f"the new session's start (settings, conversation and recording) takes "
                f"{size:,} bytes encoded, over the limit of {MAX_START_BYTES:,} (Temporal "
                "takes at most 2 MB in one payload)"
            )
        await self._start_new(session_id, start, task_queue)

    async def _replay_turn(
        self,
        replay_id: str,
        recorded: RecordedTurn,
        report: ReplayReport,
        timeout_s: float | None,
    ) -> bool:
        """Replay one turn; False when the replay stops there."""
        began = time.monotonic()
        ack = await self.prompt(replay_id, recorded.prompt)
        record = await self.wait_turn(replay_id, ack.turn_id, timeout_s=timeout_s)
        report.turns.append(
            TurnReplay(
                turn=recorded.turn,
                recorded_answer=recorded.answer,
                recorded_calls=[c.tool_use() for c in recorded.calls],
                status=record.status,
                stop_reason=record.stop_reason,
                error=record.error,
                output=record.output,
                usage=record.usage,
                seconds=time.monotonic() - began,
            )
        )
        if record.stop_reason == REPLAY_DIVERGED:
            return False
        if record.status == "awaiting_human":
            report.stopped = f"turn {recorded.turn} waited for a person; a replay asks nobody"
            await self.cancel(replay_id, reason="a replay asks nobody")
            return False
        if record.status != "completed" and record.status != recorded.status:
            report.stopped = f"turn {recorded.turn} {record.status}: {record.error}"
            return False
        return True

    async def _read_replay(self, replay_id: str, report: ReplayReport) -> None:
        """Fill the report in from the replay session: answers, calls, the divergence."""
        for _ in range(100):  # the close signal lands; the session's last words are kept
            state = await self.state(replay_id)
            if state.status in ("closed", "idle"):
                break
            await asyncio.sleep(0.05)
        _, turns = recorded_turns(state)
        replayed = {t.turn: t for t in turns}
        for turn in report.turns:
            mine = replayed.get(report.turns.index(turn) + 1)
            if mine is not None:
                turn.replayed_answer = mine.answer
                turn.replayed_calls = [c.tool_use() for c in mine.calls]
        divergence = state.replay.divergence if state.replay is not None else None
        report.divergence = divergence
        report.diverged = divergence is not None
        report.replayed_usage = state.usage


def replay_config(
    case: ReplayCase,
    *,
    model: str | None = None,
    config: SessionConfig | None = None,
    system: str | None = None,
) -> SessionConfig:
    """The replay session's settings: the recording's (or ``config``), with the changes.

    A replay notifies nobody (``notify`` is dropped): its turns are not production's.
    """
    changes: dict[str, Any] = {"notify": [], "replay": None}
    if model is not None:
        changes["model"] = model
    if system is not None:
        changes["system"] = system
    return (config or case.settings).model_copy(update=changes, deep=True)


def _use_json(use: ToolUse | None) -> dict[str, Any] | None:
    if use is None:
        return None
    return {"name": use.name, "input": use.input}


def _usage_json(usage: TokenUsage | None) -> dict[str, Any] | None:
    return None if usage is None else usage.model_dump(mode="json")
