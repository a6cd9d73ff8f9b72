"""The ``keel`` commands that look at sessions without changing them.

``show``, ``pending``, ``watch``, ``sessions``; each a coroutine ``(args, settings) -> exit code``.
``add_parser`` adds their parsers to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from keel.worker.cli import flags
from keel.worker.cli.console import (
    EXIT_ENDED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_WAITING,
    interrupt_json,
    print_interrupts,
    print_sessions,
    render_block,
    sessions_json,
    show_json,
)

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.settings import Settings
    from keel.workflows.contracts import SessionState, StandingApproval
    from keel.workflows.cost import Spend

T = TypeVar("T")


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    """``keel show``: the conversation of a session."""
    from keel.worker.cli.follow import tokens_text
    from keel.worker.cli.session_access import reading_session
    from keel.worker.client.effects_listing import retried_text
    from keel.workflows.cost import cost_text
    from keel.workflows.run_ends import ENDED_STOP_REASONS

    async with reading_session(settings, args.session, wait_for_worker=False) as access:
        state = await access.keel.state(args.session)
    if args.json:
        print(json.dumps(show_json(state)))
        return EXIT_OK
    for message in state.messages:
        for block in message.content:
            print(f"{message.role}: {render_block(block.model_dump(mode='json'))}")
    for event in state.events:
        if event.type == "interrupt_decided" and event.detail.get("key"):
            d = event.detail
            print(
                f"[interrupt {d.get('id')} {d.get('status')} by {d.get('by')}, "
                f"signature verified: key {d.get('key')}]"
            )
        elif event.type == "tool_retried":  # a call that ran again after an unknown outcome
            print(f"[tool {event.detail.get('tool')} {retried_text(event.detail)}]")
    print_standing(state.pending.standing)
    for t in state.turns:
        u = t.usage
        ended = f"; {t.error}" if t.stop_reason in ENDED_STOP_REASONS else ""
        cost = f", {cost_text(t.cost_usd, t.cost_unknown)}" if t.cost_usd is not None else ""
        print(
            f"[turn {t.turn_id} {t.status}: {t.cycles} model calls, "
            f"{tokens_text(u.inputTokens, u.outputTokens, u)}{cost}{ended}]"
        )
        for name, spent in t.sub_agents.items():
            print(f"[  sub-agent {name}: {spend_text(spent)}]")
    u = state.usage
    cost = cost_text(state.cost_usd, state.cost_unknown)
    if state.cost_usd is None and state.cost_unknown:
        cost += " (no price: keel run --price, or the workers' KEEL_PRICES)"
    if u.unknown:
        print(f"[{state.status}; {tokens_text(u.inputTokens, u.outputTokens, u)}, {cost}]")
    else:
        print(
            f"[{state.status}; {u.totalTokens} tokens: {u.inputTokens} in / {u.outputTokens} "
            f"out, {cost}]"
        )
    for name, spent in state.sub_agents.items():
        print(f"[sub-agent {name} in all: {spend_text(spent)}]")
    return EXIT_OK


def spend_text(spent: Spend) -> str:
    """A sub-agent's spend as ``keel show`` prints it: tokens, and cost when any is known."""
    from keel.worker.cli.follow import tokens_text
    from keel.workflows.cost import cost_text

    u, cost = spent.usage, cost_text(spent.cost_usd, spent.cost_unknown)
    return f"{tokens_text(u.inputTokens, u.outputTokens, u)}, {cost}"


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """``keel pending``: the interrupts a session waits on, and its running tools."""
    import asyncio

    from keel.worker.cli.session_access import reading_session

    async with reading_session(settings, args.session, wait_for_worker=False) as access:
        view, end = await asyncio.gather(
            access.keel.pending(args.session), access.keel.ended(args.session)
        )
    if args.json:
        out = view.model_dump(mode="json", exclude={"interrupts"})
        out["interrupts"] = [interrupt_json(i) for i in view.interrupts]
        ended = {"status": end.status, "ended": end.text} if end is not None else {}
        print(json.dumps({"session": args.session, **ended, **out}))
    elif end is not None:  # nothing can be decided: no command is offered
        print(f"no pending interrupts in session {args.session}: {end.text}")
    elif view.interrupts:
        print_interrupts(args.session, view.interrupts)
        print_standing(view.standing)
    else:
        running = ", ".join(u.name for u in view.running) or "nothing"
        print(f"no pending interrupts in session {args.session}; running: {running}")
        print_standing(view.standing)
    return EXIT_OK


def print_standing(standing: Sequence[StandingApproval]) -> None:
    """One line per standing approval: the tool, for which calls, by whom (keel policy)."""
    from keel.workflows.standing import describe
    from keel.workflows.standing_bounds import bounded, describe_left

    now = datetime.now(UTC)
    for approval in standing:
        by = f" by {approval.granted_by}" if approval.granted_by else ""
        left = f"; {describe_left(approval, now)}" if bounded(approval) else ""
        print(f"[approved always: {approval.tool}, {describe(approval.when)}{by}{left}]")


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    """``keel watch``: print a session's events as they happen.

    Runs until Ctrl-C or the session closes (exit 0); with ``--until-idle``, until no turn
    runs or is queued (exit 0) or a turn waits for a human (exit 3). A session Temporal
    ended (terminated, cancelled, timed out, failed) ends it with exit 4. It only reads: with a
    Temporal of its own (embedded), nothing runs a turn that is not finished, which it says
    (with ``--until-idle``: exit 1, once the events so far are printed).
    """
    from keel.worker.cli.follow import Follower
    from keel.worker.cli.session_access import reading_session
    from keel.worker.shell import command
    from keel.workflows.run_ends import ENDED_STATUSES

    waiting = False

    def idle(state: SessionState) -> bool:
        nonlocal waiting
        if not args.until_idle:
            return False
        waiting = any(t.status == "awaiting_human" for t in state.turns)
        return waiting or all(t.status not in ("queued", "running") for t in state.turns)

    async with reading_session(settings, args.session, wait_for_worker=True) as access:
        keel = access.keel
        stop: Callable[[SessionState], bool] = idle
        stalled: str | None = None
        if access.embedded:  # nothing else runs here: a turn not finished stays so
            now = await keel.state(args.session, events_since=sys.maxsize, include_messages=False)
            unfinished = [t.turn_id for t in now.turns if t.status in ("queued", "running")]
            if unfinished:
                stalled = (
                    f"turn {unfinished[0]} of session {args.session} is not finished, and this "
                    "command only reads: it goes on with "
                    f"`{command('keel', 'wait', args.session)}`"
                )
                if args.until_idle:  # the events so far, then say so
                    stop = _caught_up(now.event_count)
                else:
                    print(f"keel: note: {stalled}", file=sys.stderr, flush=True)
        follower = Follower(
            keel,
            args.session,
            args.since,
            out=sys.stdout,
            style="json" if args.json else "events",
            stream_text=not args.json,
        )
        last = await _until_ctrl_c(follower.follow(stop))
        if follower.text is not None:
            follower.text.end_line()
        if last is not None and last.status in ENDED_STATUSES:  # Temporal ended it: say how
            end = await keel.ended(args.session)
            print(f"keel: {end.text if end else f'the session {last.status}'}", file=sys.stderr)
            return EXIT_ENDED
    if stalled is not None and args.until_idle:
        print(f"keel: {stalled}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_WAITING if waiting else EXIT_OK


def _caught_up(events: int) -> Callable[[SessionState], bool]:
    """A ``Follower.follow`` stop: once the first ``events`` events have been printed."""
    return lambda state: state.event_count >= events


async def cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    """``keel sessions``: the sessions on this task queue, newest first."""
    from keel.activities.store import open_store
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.keel_client import KeelClient
    from keel.worker.server.connection import open_connection

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    async with open_connection(settings) as connection, connection.reader():
        keel = KeelClient(
            connection.client, settings.task_queue, open_store(settings.store, settings.keyring())
        )
        sessions = await keel.list_sessions(limit=args.limit, open_only=args.open)
    if args.json:
        print(json.dumps(sessions_json(sessions)))
    else:
        print_sessions(sessions, settings.task_queue)
    return EXIT_OK


async def _until_ctrl_c(work: Coroutine[Any, Any, T]) -> T | None:
    """Run ``work`` until it returns or the user presses Ctrl-C (then None)."""
    import asyncio

    loop = asyncio.get_running_loop()
    pressed = asyncio.Event()
    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, pressed.set)
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(pressed.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)
        waiter.cancel()
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
    return None if task.cancelled() else task.result()


def add_parser(sub: flags.Subparsers) -> None:
    """``keel show``, ``pending``, ``watch`` and ``sessions``, on ``keel``'s subparsers."""
    for name, handler, text in (
        ("show", cmd_show, "print a session's conversation"),
        ("pending", cmd_pending, "show what a session's running turn waits on"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("session", type=flags.session_id)
        cmd.add_argument("--json", action="store_true", help="print JSON")
        cmd.set_defaults(handler=handler)

    watch = sub.add_parser("watch", help="follow a session's events live")
    watch.add_argument("session", type=flags.session_id)
    watch.add_argument(
        "--since", type=int, default=0, metavar="N", help="skip the first N events (default 0)"
    )
    watch.add_argument("--json", action="store_true", help="print each event as a JSON line")
    watch.add_argument(
        "--until-idle",
        action="store_true",
        help="stop when no turn runs or is queued (exit 0) or one waits for approval (exit 3); "
        "a session Temporal ended exits 4",
    )
    watch.set_defaults(handler=cmd_watch)

    sessions = sub.add_parser("sessions", help="list sessions, newest first")
    sessions.add_argument("--json", action="store_true", help="print a JSON array")
    sessions.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N sessions (default 20)"
    )
    sessions.add_argument(
        "--open", action="store_true", help="only sessions still open (their workflow runs)"
    )
    sessions.set_defaults(handler=cmd_sessions)
