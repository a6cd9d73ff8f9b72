"""``keel attach SESSION --tools MODULE``: run a session's client-side tools on this machine.

A tool declared ``@tool(runs_on="client")`` has no body a worker runs: the session publishes
each call and waits. ``keel attach`` imports the tool modules here, runs each waiting call of
their client-side tools in this process, and delivers the result to the session; it runs
until the session ends, or Ctrl-C (``--once``: until one call is served). Started again, it
picks up the calls still waiting. ``add_parser`` adds its parser to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from keel.worker.client.client_tools import ServedCall
    from keel.worker.settings import Settings


async def cmd_attach(args: argparse.Namespace, settings: Settings) -> int:
    """``keel attach``: serve the session's client-side tool calls until it ends."""
    import getpass
    import socket

    from keel.worker.cli.run_inputs import UsageError, tool_modules
    from keel.worker.cli.session_access import keel_client
    from keel.worker.client.client_tools import client_side_tools
    from keel.worker.server.connection import open_connection

    modules = tool_modules(args.tools)
    if not modules:
        raise UsageError("--tools names no module")
    if args.poll <= 0:
        raise UsageError(f"--poll must be positive, not {args.poll:g}")
    served_here = sorted(client_side_tools(modules))  # a module that has none exits 2 now
    name = args.name or f"{getpass.getuser()}@{socket.gethostname()}"
    async with open_connection(settings) as connection:
        keel = keel_client(connection, wait_for_worker=True)
        await keel.check_open(args.session)
        config = await keel.config(args.session)
        queue = await keel.session_task_queue(args.session)
        # with a server this command embeds, it runs the session's worker too
        async with connection.worker(config.tool_modules, task_queue=queue):
            print(
                f"keel: attached to {args.session}: running {', '.join(served_here)} on this "
                "machine when the session calls them (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
            served = await keel.serve_tools(
                args.session,
                modules,
                poll_s=args.poll,
                client=name,
                stop_after=1 if args.once else None,
                on_call=lambda done: _report(done, as_json=args.json),
            )
    if not args.once:
        print(f"keel: session {args.session} ended; {served} call(s) served", file=sys.stderr)
    return EXIT_OK


def _report(done: ServedCall, *, as_json: bool) -> None:
    """One line per call served: on stdout, in words or as a JSON object."""
    call = done.call
    status = done.ack.status if done.ack is not None else "refused"
    if as_json:
        line = {
            "call": call.id,
            "tool": call.tool_use.name,
            "tool_use_id": call.tool_use.toolUseId,
            "status": status,
            "repeated": done.ack.repeated if done.ack is not None else False,
            "error": done.error,
            "refused": done.refused,
        }
        print(json.dumps(line), flush=True)
        return
    what = f"{call.tool_use.name} (toolUseId {call.tool_use.toolUseId}, call {call.id})"
    if done.refused is not None:
        print(f"ran {what}: the session refused the result: {done.refused}", flush=True)
    elif done.error is not None:
        print(f"ran {what}: it failed here, the model is told: {done.error}", flush=True)
    else:
        print(f"ran {what}: result delivered", flush=True)


def add_parser(sub: flags.Subparsers) -> None:
    """``keel attach``, on ``keel``'s subparsers."""
    cmd = sub.add_parser(
        "attach",
        help="run a session's client-side tools (@tool(runs_on='client')) on this machine",
        description="Run the calls of client-side tools that SESSION waits for, here, and "
        "deliver their results; until the session ends or Ctrl-C.",
    )
    cmd.add_argument("session", type=flags.session_id)
    cmd.add_argument(
        "--tools",
        required=True,
        metavar="MOD[,MOD]",
        help="modules whose @tool(runs_on='client') functions run here, comma separated",
    )
    cmd.add_argument(
        "--name", help="this client's name in the session's event log (default: user@host)"
    )
    cmd.add_argument("--once", action="store_true", help="exit once one call was served")
    cmd.add_argument(
        "--poll",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often to ask the session for waiting calls (default 0.5)",
    )
    cmd.add_argument("--json", action="store_true", help="print each call served as a JSON line")
    cmd.set_defaults(handler=cmd_attach)
