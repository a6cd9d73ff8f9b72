"""The ``keel`` commands that look at sessions without changing them.

``show``, ``pending``, ``watch``, ``sessions``; each a coroutine ``(args, settings) -> exit code``.
``add_parser`` adds their parsers to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from keel.worker.cli import flags
from keel.worker.cli.console import (
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
    from keel.worker.server.connection import TemporalConnection
    from keel.worker.settings import Settings
    from keel.workflows.contracts import SessionState

T = TypeVar("T")


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    """``keel show``: the conversation of a session."""
    from keel.worker.cli.follow import tokens_text
    from keel.worker.cli.session_access import existing_session

    async with existing_session(
        settings, args.session, writes=False, wait_for_worker=False
    ) as keel:
        state = await keel.state(args.session)
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
    for t in state.turns:
        u = t.usage
        print(
            f"[turn {t.turn_id} {t.status}: {t.cycles} model calls, "
            f"{tokens_text(u.inputTokens, u.outputTokens, u)}]"
        )
    u = state.usage
    if u.unknown:
        print(f"[{state.status}; {tokens_text(u.inputTokens, u.outputTokens, u)}]")
    else:
        print(
            f"[{state.status}; {u.totalTokens} tokens: {u.inputTokens} in / {u.outputTokens} out]"
        )
    return EXIT_OK


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """``keel pending``: the interrupts a session waits on, and its running tools."""
    from keel.worker.cli.session_access import existing_session

    async with existing_session(
        settings, args.session, writes=False, wait_for_worker=False
    ) as keel:
        view = await keel.pending(args.session)
    if args.json:
        out = view.model_dump(mode="json", exclude={"interrupts"})
        out["interrupts"] = [interrupt_json(i) for i in view.interrupts]
        print(json.dumps({"session": args.session, **out}))
    elif view.interrupts:
        print_interrupts(args.session, view.interrupts)
    else:
        running = ", ".join(u.name for u in view.running) or "nothing"
        print(f"no pending interrupts in session {args.session}; running: {running}")
    return EXIT_OK


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    """``keel watch``: print a session's events as they happen.

    Runs until Ctrl-C or the session closes (exit 0); with ``--until-idle``, until no turn
    runs or is queued (exit 0) or a turn waits for a human (exit 3).
    """
    from keel.worker.cli.follow import Follower
    from keel.worker.cli.session_access import existing_session

    waiting = False

    def idle(state: SessionState) -> bool:
        nonlocal waiting
        if not args.until_idle:
            return False
        waiting = any(t.status == "awaiting_human" for t in state.turns)
        return waiting or all(t.status not in ("queued", "running") for t in state.turns)

    async with existing_session(settings, args.session, writes=False, wait_for_worker=True) as keel:
        follower = Follower(
            keel,
            args.session,
            args.since,
            out=sys.stdout,
            style="json" if args.json else "events",
            stream_text=not args.json,
        )
        await _until_ctrl_c(follower.follow(idle))
        if follower.text is not None:
            follower.text.end_line()
    return EXIT_WAITING if waiting else EXIT_OK


@asynccontextmanager
async def _query_worker(connection: TemporalConnection) -> AsyncIterator[None]:
    """With an embedded server, a worker that answers queries (workflows only, no tools)."""
    from temporalio.worker import Worker

    from keel.worker.process.sandbox import sandbox_runner
    from keel.workflows.session import AgentSession

    if not connection.embedded:
        yield
        return
    worker = Worker(
        connection.client,
        task_queue=connection.settings.task_queue,
        workflows=[AgentSession],
        workflow_runner=sandbox_runner(),
    )
    async with worker:
        yield


async def cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    """``keel sessions``: the sessions on this task queue, newest first."""
    from keel.activities.store import open_store
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.keel_client import KeelClient
    from keel.worker.server.connection import open_connection

    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    async with open_connection(settings) as connection, _query_worker(connection):
        keel = KeelClient(
            connection.client, settings.task_queue, open_store(settings.store, settings.keyring())
        )
        sessions = await keel.list_sessions(limit=args.limit)
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
        help="stop when no turn runs or is queued (exit 0) or one waits for approval (exit 3)",
    )
    watch.set_defaults(handler=cmd_watch)

    sessions = sub.add_parser("sessions", help="list sessions, newest first")
    sessions.add_argument("--json", action="store_true", help="print a JSON array")
    sessions.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N sessions (default 20)"
    )
    sessions.set_defaults(handler=cmd_sessions)
