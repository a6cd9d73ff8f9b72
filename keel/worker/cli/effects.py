"""The ``keel`` commands of tool calls whose effect is journaled: ``resolve`` and ``effects``.

A ``write`` tool's attempt that ended without a result (its worker died mid-call) is not run
again blindly: the session opens an ``outcome_unknown`` interrupt, which ``keel approve`` (run
it again), ``keel deny`` (the model gets an error) or ``keel resolve`` (record its result
without running it) decides. ``keel effects`` lists the journaled calls, their attempts and
how each was settled. Each command is a coroutine ``(args, settings) -> exit code``;
``add_parser`` adds their parsers to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.settings import Settings
    from keel.workflows.effect_contracts import EffectAttempt, EffectRecord

# How an attempt's end reads in ``keel effects`` (``AttemptEnd``); None: it never said.
ENDS = {
    "returned": "returned a result",
    "raised": "raised an error",
    "asked": "asked a person a question",
    "timed_out": "timed out",
    "cancelled": "was cancelled",
}
NO_END = "never said how it ended (its worker stopped, or it still runs): the outcome is unknown"


def result_text(args: argparse.Namespace) -> str:
    """The result ``keel resolve`` records: ``--result``, or the text of ``--result-file``.

    The text is recorded as it is (a file's last newline too); a blank one is refused, as
    the web page refuses it: a result nobody wrote is more likely a mistake than the tool's.

    Raises:
        UsageError: the file cannot be read, is over the limit, or is not UTF-8 text; the
            result is blank; or neither flag was given (argparse refuses both, and neither,
            first).
    """
    from keel.worker.cli.run_inputs import UsageError, read_text_file
    from keel.workflows.limits import RESOLVED_RESULT_BYTES

    if args.result_file is not None:
        text = read_text_file("--result-file", args.result_file, RESOLVED_RESULT_BYTES)
        where = f"--result-file {args.result_file}: the file"
    elif args.result is not None:
        text, where = args.result, "--result"
    else:
        raise UsageError("give the tool's result with --result TEXT or --result-file FILE")
    if not text.strip():
        raise UsageError(f"{where} is blank: give the tool's result, as it returned it")
    return text


async def cmd_resolve(args: argparse.Namespace, settings: Settings) -> int:
    """``keel resolve``: record an unknown outcome's result, then wait like ``keel run``."""
    from keel.worker.cli.turn_follow import approver_key, approver_name, finish_turn
    from keel.worker.cli.turns import acting, within_limits
    from keel.workflows.contracts import Decision

    result = result_text(args)  # a bad file fails before anything is read or sent
    key = approver_key(args)
    approver = approver_name(args)
    within_limits(
        Decision(
            interrupt_id=args.id,
            decision="resolve",
            reason=args.reason,
            approver=approver,
            result=result,
        )
    )
    async with acting(settings, args, writes=True) as access:
        keel = access.keel
        since = await keel.event_count(args.session)
        ack = await keel.resolve(
            args.session, args.id, result, reason=args.reason, approver=approver, key=key
        )
        return await finish_turn(
            keel, args.session, ack.turn_id, since, args, embedded=access.embedded
        )


async def cmd_effects(args: argparse.Namespace, settings: Settings) -> int:
    """``keel effects``: the session's journaled tool calls, their attempts and outcomes."""
    from keel.worker.cli.session_access import reading_session

    async with reading_session(settings, args.session, wait_for_worker=False) as access:
        records = await access.keel.effects(args.session)
    if args.json:
        print(json.dumps([record.model_dump(mode="json") for record in records]))
        return EXIT_OK
    for line in effects_lines(args.session, records):
        print(line)
    return EXIT_OK


def effects_lines(session: str, records: list[EffectRecord]) -> list[str]:
    """What ``keel effects`` prints for a person: one block per call, oldest first."""
    if not records:
        return [
            f"no journaled tool calls in session {session} (write and idempotent tools are "
            "journaled; read tools are not)"
        ]
    lines = [f"session {session}: {len(records)} journaled tool call(s), oldest first"]
    for record in records:
        lines.extend(record_lines(record))
    return lines


def record_lines(record: EffectRecord) -> list[str]:
    """One call: its tool and id, effect class, outcome and who settled it; then its attempts."""
    by = f" by {record.decided_by}" if record.decided_by else ""
    via = f" (interrupt {record.interrupt_id})" if record.interrupt_id else ""
    turn = f", turn {record.turn}" if record.turn is not None else ""
    head = (
        f"{record.tool} (toolUseId {record.tool_use_id}{turn}): "
        f"{record.effect}, {record.outcome}{by}{via}"
    )
    attempts = [f"  {attempt_line(a)}" for a in record.attempts]
    return [head, *(attempts or ["  no attempt started"])]


def attempt_line(attempt: EffectAttempt) -> str:
    """``attempt N: started T, ended T: how`` (or that it never said how it ended)."""
    worker = f" on {attempt.worker}" if attempt.worker else ""
    start = f"attempt {attempt.attempt}: started {attempt.started_at}{worker}"
    if attempt.ended is None:
        return f"{start}, {NO_END}"
    when = f" at {attempt.ended_at}" if attempt.ended_at else ""
    return f"{start}, ended{when}: {ENDS.get(attempt.ended, attempt.ended)}"


def add_parser(sub: flags.Subparsers) -> None:
    """``keel resolve`` and ``keel effects``, on ``keel``'s subparsers."""
    resolve = sub.add_parser(
        "resolve",
        help="record the result of a tool whose outcome is unknown, then wait like run",
        description="Decide an outcome_unknown interrupt (a write tool's attempt ended without "
        "a result) by recording the tool's result without running it again; the model reads "
        "it as the tool's result. `keel approve` runs the tool again instead, `keel deny` "
        "gives the model an error.",
    )
    resolve.add_argument("session", type=flags.session_id)
    resolve.add_argument("id", help="the interrupt id (see keel pending)")
    given = resolve.add_mutually_exclusive_group(required=True)
    given.add_argument("--result", metavar="TEXT", help="the tool's result, as text")
    given.add_argument(
        "--result-file", metavar="FILE", help="the tool's result: the text of FILE, as it is"
    )
    resolve.add_argument("--reason", help="why; kept with the decision")
    resolve.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
    flags.key_flag(resolve)
    flags.waiting_flags(resolve)
    flags.mcp_flag(resolve, embedded=True)
    resolve.set_defaults(handler=cmd_resolve)

    effects = sub.add_parser(
        "effects",
        help="list a session's journaled tool calls: attempts, outcome, who settled them",
        description="Only reads. Each call of a write or idempotent tool, oldest first: the "
        "tool, its toolUseId, its effect class, the attempts of its body (when each started "
        "and ended, and how), its outcome and who decided it.",
    )
    effects.add_argument("session", type=flags.session_id)
    effects.add_argument(
        "--json", action="store_true", help="print a JSON list of the calls (EffectRecord)"
    )
    effects.set_defaults(handler=cmd_effects)
