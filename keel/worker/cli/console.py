"""What the ``keel`` command prints (turn results, interrupts, conversations, sessions) and asks.

Exit codes: 0 completed, 3 waiting for a human, 1 failed, 2 invalid input or rejected request
(the reason on stderr).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from keel.worker.shell import command

if TYPE_CHECKING:  # imported by the commands that print them: `keel --help` stays light
    from keel.worker.client.reading import SessionSummary
    from keel.workflows.contracts import Interrupt, SessionState, TurnRecord

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_WAITING = 3
# Temporal ended the session (terminated, cancelled, timed out, failed): nothing goes on
EXIT_ENDED = 4
# ``keel wait --timeout`` ran out, as timeout(1) says it
EXIT_TIMEOUT = 124
# ``keel``'s output went to a reader that stopped reading (``keel sessions | head -2``), as a
# process killed by SIGPIPE exits
EXIT_PIPE = 141
# What ``keel run`` prints for a completed turn whose answer has no text.
EMPTY_REPLY = "(the model's reply was empty)"
STATUS_EXIT = {"completed": EXIT_OK, "awaiting_human": EXIT_WAITING}
# The CLI contract names a turn that waits for a person ``interrupted``.
CONTRACT_STATUS = {"awaiting_human": "interrupted"}


def interrupt_json(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt as the CLI contract shows it to approvers."""
    return {
        "id": interrupt.id,
        "kind": interrupt.kind,
        "tool_use": interrupt.tool_use.model_dump(mode="json"),
        "name": interrupt.name,
        "reason": interrupt.reason,
        "signing": interrupt.signing,
        **escalation_json(interrupt),
    }


def escalation_json(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt's escalation, on a session with escalation steps.

    Who may decide now (``may_decide``; empty: anyone but those of steps to come), who the
    steps that came added, and the next step (``{"at": ISO time, "approvers": [...]}`` or
    None).
    """
    if interrupt.opened_at is None:
        return {}
    coming = None
    if interrupt.next_escalation_at is not None:
        coming = {"at": interrupt.next_escalation_at, "approvers": interrupt.next_approvers}
    return {
        "may_decide": interrupt.may_decide,
        "escalated_to": interrupt.escalated_to,
        "next_escalation": coming,
    }


def escalation_lines(interrupt: Interrupt) -> list[str]:
    """Who may decide an interrupt now and when its next escalation step comes, for a person."""
    if interrupt.opened_at is None:
        return []
    anyone = "anyone but escalation approvers before their step"
    lines = [f"may decide: {', '.join(interrupt.may_decide) or anyone}"]
    if interrupt.escalated_to:
        lines.append(
            f"escalated:  to {', '.join(interrupt.escalated_to)} at {interrupt.escalated_at}"
        )
    if interrupt.next_escalation_at is not None:
        lines.append(
            f"next step:  {', '.join(interrupt.next_approvers)} at {interrupt.next_escalation_at}"
        )
    return lines


def turn_json(session: str, record: TurnRecord) -> dict[str, Any]:
    """The contract's JSON object for a turn result."""
    return {
        "session": session,
        "workflow_id": session,
        "turn": record.turn_id,
        "status": CONTRACT_STATUS.get(record.status, record.status),
        "stop_reason": record.stop_reason,
        "interrupts": [interrupt_json(i) for i in record.interrupts],
        "message": record.message.model_dump(mode="json") if record.message else None,
        "usage": record.usage.model_dump(mode="json"),
        "cost_usd": record.cost_usd,
        "cost_unknown": record.cost_unknown,
        "error": record.error,
        "output": record.output,
    }


def print_interrupts(
    session: str, interrupts: Sequence[Interrupt], extra: Sequence[str] = ()
) -> None:
    """Show pending interrupts to a person, with the commands that decide them.

    ``extra``: words the commands need after their arguments (``--mcp NAME=COMMAND``).
    """
    from keel.workflows.interrupt_kinds import fields, kind_of

    for interrupt in interrupts:
        use = interrupt.tool_use
        print(kind_of(interrupt).heading.format(**fields(interrupt)))
        print(f"  id:    {interrupt.id}")
        print(f"  tool:  {use.name} (toolUseId {use.toolUseId})")
        print(f"  input: {json.dumps(use.input, sort_keys=True)}")
        if interrupt.note:  # a sub-agent's session refused the last decision given here
            print(f"  note:  {interrupt.note}")
        for line in escalation_lines(interrupt):
            print(f"  {line}")
        for line in decide_commands(session, interrupt, extra):
            print(f"  {line}")


def decide_commands(session: str, interrupt: Interrupt, extra: Sequence[str] = ()) -> list[str]:
    """The commands that decide an interrupt, quoted for a shell (see ``keel.worker.shell``).

    Its kind's verbs, in order (``keel.workflows.interrupt_kinds``).
    """
    from keel.workflows.interrupt_kinds import kind_of

    lines = []
    for verb in kind_of(interrupt).offered():
        arg = [verb.placeholder] if verb.placeholder else []
        lines.append(command("keel", verb.name, session, interrupt.id, *arg, *extra) + verb.suffix)
    return lines


def print_turn(session: str, record: TurnRecord, as_json: bool, extra: Sequence[str] = ()) -> int:
    """Print a turn result; returns the exit code.

    ``extra``: words the commands printed need after their arguments (see ``print_interrupts``).
    """
    from keel.workflows.cycle import text_of

    if as_json:
        print(json.dumps(turn_json(session, record)))
    else:
        answer = text_of(record.message)
        if answer and record.status != "awaiting_human":
            print(answer)
        elif record.status == "completed" and record.output is None:
            print(EMPTY_REPLY)
        print_interrupts(session, record.interrupts, extra)
        if record.status not in ("completed", "awaiting_human"):
            print(
                f"turn {record.turn_id} of session {session} {record.status}"
                + (f": {record.error}" if record.error else ""),
                file=sys.stderr,
            )
    return turn_exit(record)


def turn_exit(record: TurnRecord) -> int:
    """The exit code of a command that ends with a turn's result."""
    from keel.workflows.run_ends import ENDED_STOP_REASONS

    if record.stop_reason in ENDED_STOP_REASONS:  # Temporal ended the session under it
        return EXIT_ENDED
    return STATUS_EXIT.get(record.status, EXIT_FAILED)


def detached_json(session: str, turn_id: int) -> dict[str, Any]:
    """What ``keel run --detach --json`` prints: the turn it started runs."""
    return {"session": session, "workflow_id": session, "turn": turn_id, "status": "running"}


def print_where(session: str, *, closed: bool = False, extra: Sequence[str] = ()) -> None:
    """Tell on stderr which session a turn ran in, and the commands that go on with it.

    Args:
        session: the session.
        closed: the session takes no more turns (a scheduled job's, after its one turn):
            only ``keel show`` is offered.
        extra: words ``keel run`` needs after ``--session ID`` (``--mcp NAME=COMMAND``).
    """
    show = (command("keel", "show", session), "the conversation and its usage")
    if closed:
        print(f"session {session} is closed; see it with: {show[0]}", file=sys.stderr)
        return
    commands = [
        (command("keel", "run", "--session", session, *extra) + " PROMPT", "the next turn"),
        (command("keel", "watch", session), "follow it live"),
        show,
    ]
    width = max(len(line) for line, _ in commands)
    print(f"session {session}; go on with:", file=sys.stderr)
    for line, what in commands:
        print(f"  {line.ljust(width)}  {what}", file=sys.stderr)


def print_interrupted(
    session: str, turn_id: int | None, *, embedded: bool, extra: Sequence[str] = ()
) -> None:
    """Tell on stderr, after Ctrl-C, that the turn goes on and the commands that reach it.

    Args:
        session: the session.
        turn_id: the turn followed; None when Ctrl-C came before the session took it.
        embedded: the command ran the Temporal server itself, which stopped with it: the
            turn goes on when the next command runs here.
        extra: words ``keel wait`` and ``keel cancel`` need (``--mcp NAME=COMMAND``).
    """
    turn = f"turn {turn_id}" if turn_id is not None else "the turn"
    where = (
        "goes on when the next keel command runs in this folder"
        if embedded
        else "goes on in the background"
    )
    commands = [
        (command("keel", "wait", session, *extra), "prints its result"),
        (command("keel", "cancel", session, *extra), "stops it"),
    ]
    width = max(len(line) for line, _ in commands)
    from keel.worker.cli.follow import end_streamed_line

    end_streamed_line(sys.stderr)  # not after a model's streamed text
    print(f"keel: interrupted; {turn} of session {session} {where}:", file=sys.stderr)
    for line, what in commands:
        print(f"  {line.ljust(width)}  {what}", file=sys.stderr)


def print_detached(session: str, turn_id: int) -> None:
    """Tell on stderr that a detached turn runs, and the commands that follow it."""
    print(
        f"turn {turn_id} of session {session} runs; `{command('keel', 'wait', session)}` "
        f"prints its result, `{command('keel', 'watch', session)}` follows it",
        file=sys.stderr,
    )


def show_json(state: SessionState) -> dict[str, Any]:
    """The contract's JSON object for ``keel show --json``, plus ``turns`` (usage per turn).

    ``usage`` and ``cost_usd`` are the session's totals, its sub-agents' included (listed
    apart in ``sub_agents``); ``cost_usd`` is the known part, null while none is known, and
    ``cost_unknown`` says some calls' cost is unknown (``keel.workflows.cost``).
    """
    return {
        "session": state.session_id,
        "workflow_id": state.session_id,
        "status": state.status,
        "messages": [m.model_dump(mode="json") for m in state.messages],
        "pending": state.pending.model_dump(mode="json"),
        "usage": state.usage.model_dump(mode="json"),
        "cost_usd": state.cost_usd,
        "cost_unknown": state.cost_unknown,
        "sub_agents": {n: s.model_dump(mode="json") for n, s in state.sub_agents.items()},
        "turns": [
            {
                "turn": t.turn_id,
                "status": t.status,
                "stop_reason": t.stop_reason,
                "cycles": t.cycles,
                "usage": t.usage.model_dump(mode="json"),
                "cost_usd": t.cost_usd,
                "cost_unknown": t.cost_unknown,
                "sub_agents": {n: s.model_dump(mode="json") for n, s in t.sub_agents.items()},
                "output": t.output,
            }
            for t in state.turns
        ],
        "signed_decisions": [
            {k: e.detail.get(k) for k in ("id", "status", "by", "key")}
            for e in state.events
            if e.type == "interrupt_decided" and e.detail.get("key")
        ],
        # each tool run again after an unknown outcome, with how the attempt before ended
        "tool_retried": [
            {"turn": e.turn, **e.detail} for e in state.events if e.type == "tool_retried"
        ],
    }


def render_block(block: dict[str, Any]) -> str:
    """One content block as a line of text: text as it is, other kinds as tagged JSON."""
    kind, value = next(iter(block.items()))
    if kind == "text":
        return str(value)
    return f"[{kind}] {json.dumps(value)}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def sessions_json(sessions: Sequence[SessionSummary]) -> list[dict[str, Any]]:
    """The JSON array ``keel sessions --json`` prints."""
    return [
        {
            "session": s.session,
            "workflow_status": s.workflow_status,
            "status": s.status,
            "pending_approvals": s.pending_approvals,
            "cost_usd": s.cost_usd,
            "cost_unknown": s.cost_unknown,
            "last_activity": _iso(s.last_activity),
            "started_at": _iso(s.started_at),
            "schedule": s.schedule,
        }
        for s in sessions
    ]


def print_sessions(sessions: Sequence[SessionSummary], task_queue: str) -> None:
    """A table of sessions for a person; ``?`` where a running session did not answer."""
    if not sessions:
        print(f"no sessions on task queue {task_queue!r}")
        return

    def when(value: datetime | None) -> str:
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"

    rows = [
        ("SESSION", "WORKFLOW", "STATUS", "PENDING", "COST", "LAST ACTIVITY", "SCHEDULE", "STARTED")
    ]
    for s in sessions:
        running = s.workflow_status == "running"
        unknown = "?" if running else "-"
        rows.append(
            (
                s.session,
                s.workflow_status,
                s.status or unknown,
                unknown if s.pending_approvals is None else str(s.pending_approvals),
                _cost_cell(s.cost_usd, s.cost_unknown, unknown),
                when(s.last_activity),
                s.schedule or "-",
                when(s.started_at),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]))


def _cost_cell(cost_usd: float | None, unknown: bool, missing: str) -> str:
    """A session's cost in the table.

    ``$0.0042``; ``>=$0.0042`` when some calls' cost is unknown; ``?`` when none is known;
    ``missing`` when not known at all (``?`` for a running session that did not answer,
    ``-`` for one that is not running).
    """
    from keel.workflows.cost import dollars

    if cost_usd is None:
        return "?" if unknown else missing
    return f">={dollars(cost_usd)}" if unknown else dollars(cost_usd)


# The thread that reads the terminal's next line, and where that line goes: to the question
# asked now. A withdrawn question's thread, still reading, serves the next question; a line
# it reads while nothing is asked is dropped (never taken as the answer to a later question).
_reader: dict[str, Any] = {}


async def ask(question: str) -> str | None:
    """Ask a person one line on the terminal; None on end of input or Ctrl-C.

    The line is read in a daemon thread, so the event loop (and an in-process worker)
    keeps running while the person thinks. A question may be withdrawn (the task asking is
    cancelled: decided in another terminal); its reading thread then serves the next one.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not answer.done():
            answer.set_result(value)

    def deliver(line: str | None) -> None:
        try:
            loop.call_soon_threadsafe(settle, line)
        except RuntimeError:  # the loop is gone: nobody waits for the answer
            pass

    def read() -> None:
        try:
            line = sys.stdin.readline()
        except (OSError, ValueError):
            line = ""
        # no longer reading, before the answer is delivered: the next question (asked once
        # this answer is in) starts a thread of its own instead of waiting on this one, which
        # is about to end (seen as a hang when a denial's reason followed its "n")
        _reader["reading"] = False
        to = _reader.pop("deliver", None)
        if to is not None:
            to(line or None)

    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, settle, None)
    try:
        print(question, end="", flush=True)
        _reader["deliver"] = deliver
        if not _reader.get("reading"):  # a withdrawn question's thread still reads: reuse it
            _reader["reading"] = True
            threading.Thread(target=read, name="keel-ask", daemon=True).start()
        line = await answer
    finally:
        if _reader.get("deliver") is deliver:
            _reader.pop("deliver", None)
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)
    if line is None:
        print(flush=True)
        return None
    return line.rstrip("\r\n")


# A person's decision on the terminal: the verb, and the reason (or, for resolve, the result).
Answer = tuple[Literal["approve", "deny", "resolve"], str | None]


def parse_answer(raw: str) -> Any:
    """An answer as typed: JSON when it parses as JSON, else the text itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


async def ask_question(interrupt: Interrupt) -> tuple[Any] | None:
    """Show a tool's question and read the answer; None when the person gave none."""
    use = interrupt.tool_use
    print(f"tool {use.name!r} asks ({interrupt.name}): {interrupt.reason}")
    print(f"  input: {json.dumps(use.input, sort_keys=True)}")
    print(f"  id:    {interrupt.id}")
    answer = await ask("answer (JSON or text): ")
    if answer is None:
        return None
    return (parse_answer(answer.strip()),)


async def ask_decision(interrupt: Interrupt) -> Answer | None:
    """Show an interrupt and ask approve or deny; None when the person gave no answer.

    An interrupt whose kind may be resolved (``outcome_unknown``: the tool may or may not
    have run) is asked ``run it again? [y/N/r]``; ``r`` asks for the tool's result to record.
    """
    from keel.workflows.interrupt_kinds import kind_of

    use = interrupt.tool_use
    pretty = json.dumps(use.input, indent=2, sort_keys=True).replace("\n", "\n         ")
    print(f"{interrupt.reason}:")
    print(f"  tool:  {use.name} (toolUseId {use.toolUseId})")
    print(f"  input: {pretty}")
    print(f"  id:    {interrupt.id}")
    resolvable = "resolve" in kind_of(interrupt).verbs
    question = "run it again? [y/N, r: record its result] " if resolvable else "approve? [y/N] "
    answer = await ask(question)
    if answer is None:
        return None
    said = answer.strip().lower()
    if said in ("y", "yes"):
        return "approve", None
    if resolvable and said in ("r", "resolve"):
        result = await ask("its result (one line): ")
        while result is not None and not result.strip():  # blank: asked again, as keel resolve
            result = await ask("its result (one line, not blank): ")
        return None if result is None else ("resolve", result)
    reason = await ask("reason (optional): ")
    if reason is None:
        return None
    return "deny", reason.strip() or None
