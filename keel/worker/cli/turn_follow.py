"""Following a turn to where it settles, and asking a person on the terminal on the way.

What the commands that wait for a turn share (``keel run``, ``wait``, ``approve``/``deny``,
``respond``, ``resolve``, ``cancel``): ``finish_turn`` follows the turn, asks for approvals
when a person is at a terminal, and prints the result; ``approver_name`` / ``approver_key``
say who decides; ``mcp_words`` / ``progress_out`` / ``interactive`` read the command's flags.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING, TextIO

from keel.worker.cli.console import (
    ask_decision,
    ask_question,
    print_interrupted,
    print_turn,
)

if TYPE_CHECKING:
    from keel.worker.client.keel_client import KeelClient
    from keel.worker.signing import ApproverKey
    from keel.workflows.contracts import TurnRecord


def mcp_words(args: argparse.Namespace) -> list[str]:
    """The ``--mcp`` flags a command was given, for the commands it prints to go on with.

    Given only to a command that embeds its server: its successor embeds one too.
    """
    return [word for spec in args.mcp for word in ("--mcp", spec)]


def progress_out(args: argparse.Namespace) -> TextIO | None:
    """Where a waiting command reports progress: stderr when asked or a terminal, else None."""
    if getattr(args, "progress", False) or (not args.json and sys.stderr.isatty()):
        return sys.stderr
    return None


def interactive(args: argparse.Namespace) -> bool:
    """Whether to ask a person for approvals: a terminal on both ends, and allowed to."""
    if args.json or getattr(args, "no_input", False):
        return False
    return sys.stdin.isatty() and sys.stdout.isatty()


def approver_key(args: argparse.Namespace) -> ApproverKey | None:
    """The private key to sign with: ``--key``, else ``KEEL_APPROVER_KEY``, else none."""
    from keel.worker.signing import ApproverKey

    path = getattr(args, "key", None) or getattr(args, "key_default", None)
    return ApproverKey.load(path) if path else None


def approver_name(args: argparse.Namespace) -> str:
    """Who decides: ``--approver``, else ``KEEL_APPROVER``, else the user's login name."""
    named = getattr(args, "approver", None) or getattr(args, "approver_default", None)
    return named or getpass.getuser()


async def finish_turn(
    keel: KeelClient,
    session: str,
    turn_id: int,
    since: int,
    args: argparse.Namespace,
    *,
    embedded: bool,
) -> int:
    """Follow a turn until it settles, asking for approvals when a person is there; print it.

    Progress goes to stderr (see ``progress_out``); the result to stdout as ``print_turn``
    prints it. When the turn waits for approval and the terminal is interactive, each
    pending interrupt is shown and decided by the person's answer, and following goes on
    until the turn ends or waits again. No answer (end of input, Ctrl-C) leaves the
    interrupt pending: exit 3. Ctrl-C while following says that the turn goes on, and the
    commands that reach it (``embedded``: this command ran the server, see
    ``print_interrupted``).
    """
    import asyncio

    try:
        return await _follow_turn(keel, session, turn_id, since, args)
    except asyncio.CancelledError:  # Ctrl-C: the session goes on without us
        print_interrupted(session, turn_id, embedded=embedded, extra=mcp_words(args))
        raise


async def _follow_turn(
    keel: KeelClient, session: str, turn_id: int, since: int, args: argparse.Namespace
) -> int:
    """``finish_turn``'s work."""
    from keel.worker.cli.decided_elsewhere import DecidedElsewhere, unless_decided
    from keel.worker.cli.follow import Follower
    from keel.worker.client.errors import RequestRejected
    from keel.workflows.interrupt_kinds import kind_of

    out = progress_out(args)
    extra = mcp_words(args)
    follower = Follower(keel, session, since, out=out, turn=turn_id, stream_text=out is not None)

    async def settled() -> TurnRecord:
        if out is None:  # nothing to show on the way: wait for the end alone, asking less
            return await keel.wait_turn(session, turn_id)
        return await follower.turn_settled(turn_id)

    record = await settled()
    refused: set[str] = set()
    while record.status == "awaiting_human" and interactive(args):
        asked = [i for i in record.interrupts if i.id not in refused]
        if not asked:
            break
        for interrupt in asked:
            try:
                if kind_of(interrupt).update == "respond":
                    value = await unless_decided(
                        keel, session, turn_id, interrupt.id, ask_question(interrupt)
                    )
                    if isinstance(value, DecidedElsewhere):
                        continue
                    if value is None:
                        record = await _held_message(
                            keel, session, await keel.turn(session, turn_id)
                        )
                        return print_turn(session, record, False, extra)
                    await keel.respond(
                        session,
                        interrupt.id,
                        value[0],
                        responder=approver_name(args),
                        key=approver_key(args),
                    )
                    continue
                answer = await unless_decided(
                    keel, session, turn_id, interrupt.id, ask_decision(interrupt)
                )
                if isinstance(answer, DecidedElsewhere):
                    continue
                if answer is None:
                    record = await _held_message(keel, session, await keel.turn(session, turn_id))
                    return print_turn(session, record, False, extra)
                decision, text = answer
                who, key = approver_name(args), approver_key(args)
                if decision == "resolve":  # the text is the tool's result
                    await keel.resolve(session, interrupt.id, text or "", approver=who, key=key)
                else:
                    await keel.decide(
                        session, interrupt.id, decision, reason=text, approver=who, key=key
                    )
            except RequestRejected as err:
                print(f"keel: {err}", file=sys.stderr)
                refused.add(interrupt.id)
        record = await settled()
    return print_turn(session, await _held_message(keel, session, record), args.json, extra)


async def _held_message(keel: KeelClient, session: str, record: TurnRecord) -> TurnRecord:
    """A waiting turn's record with the assistant message whose tools wait as its message.

    That message is held outside the conversation until its tools have run (S5), so the
    turn's own ``message`` is still the cycle before's.
    """
    if record.status != "awaiting_human":
        return record
    view = await keel.pending(session)
    if view.turn_id != record.turn_id or view.message is None:
        return record
    return record.model_copy(update={"message": view.message})
