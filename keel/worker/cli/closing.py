"""``keel close``: end a session now, as Temporal's cancel would, but as Keel closes one.

The running turn is cancelled (its model call, tools and interrupts with it), the queued
turns are dropped, and the session's workflow completes: Temporal lists it ``completed``,
``keel show`` ``closed``. What a deployment's older version still runs drains this way.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from keel.worker.settings import Settings

# How long ``keel close`` waits, by default, for the session to end.
CLOSE_WAIT_S = 60.0


async def cmd_close(args: argparse.Namespace, settings: Settings) -> int:
    """``keel close SESSION``: cancel its running turn, drop its queued ones, end it."""
    import asyncio

    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.cli.session_access import reading_session
    from keel.worker.cli.turns import acting, within_limits
    from keel.worker.client.errors import SessionClosed
    from keel.workflows.contracts import CloseInput, SessionResult

    if args.timeout <= 0:
        raise UsageError("--timeout must be more than 0 seconds")
    reason = args.reason or "closed by keel close"
    within_limits(CloseInput(reason=reason, now=True))
    try:
        async with acting(settings, args, writes=True) as access:
            await access.keel.close(args.session, reason, now=True)
            handle = access.keel.client.get_workflow_handle(args.session, result_type=SessionResult)
            try:
                result = await asyncio.wait_for(handle.result(), args.timeout)
            except TimeoutError:
                print(
                    f"keel: session {args.session} was asked to close and has not ended after "
                    f"{args.timeout:g} s (a tool that ignores cancellation, or no worker)",
                    file=sys.stderr,
                )
                return EXIT_FAILED
    except SessionClosed:  # already ended: say how, change nothing
        async with reading_session(settings, args.session, wait_for_worker=False) as access:
            end = await access.keel.ended(args.session)
        how = end.text if end is not None else "it was closed"
        if args.json:
            status = end.status if end is not None else "closed"
            print(json.dumps({"session": args.session, "status": status, "changed": False}))
        else:
            print(f"session {args.session} had already ended: {how}")
        return EXIT_OK
    if args.json:
        print(
            json.dumps(
                {
                    "session": args.session,
                    "status": "closed",
                    "changed": True,
                    "turns": result.turns,
                    "usage": result.usage.model_dump(mode="json"),
                }
            )
        )
    else:
        print(f"session {args.session} closed after {result.turns} turn(s)")
    return EXIT_OK


def add_parser(sub: flags.Subparsers) -> None:
    """``keel close``, on ``keel``'s subparsers."""
    close = sub.add_parser(
        "close",
        help="end a session now: cancel its running turn and its interrupts, drop queued turns",
    )
    close.add_argument("session", type=flags.session_id)
    close.add_argument("--reason", help="why (the cancelled turns' error; the session's log)")
    close.add_argument(
        "--timeout",
        type=float,
        default=CLOSE_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for the session to end (default {CLOSE_WAIT_S:g})",
    )
    close.add_argument("--json", action="store_true", help="print one JSON object")
    flags.mcp_flag(close, embedded=True)
    close.set_defaults(handler=cmd_close)
