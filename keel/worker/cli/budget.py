"""``keel budget SESSION [--tokens N] [--cost DOLLARS]``: raise a session's budget.

A session's token and cost budgets (``--token-budget``, ``--cost-budget``) bound what all
its turns spend; a turn that reaches one asks a person (``keel approve ID`` grants as much
again, ``--extend N`` that much) unless the session fails at caps (``--on-budget fail``).
``keel budget`` sets the session's budget from now on, and a turn waiting on that budget goes
on. ``add_parser`` adds its parser to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from keel.worker.settings import Settings


async def cmd_budget(args: argparse.Namespace, settings: Settings) -> int:
    """``keel budget``: set the session's token or cost budget."""
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.cli.turn_follow import approver_name
    from keel.worker.cli.turns import acting

    if args.tokens is None and args.cost is None:
        raise UsageError("give --tokens N, --cost DOLLARS or both")
    if args.tokens is not None and args.tokens <= 0:
        raise UsageError("--tokens must be more than 0")
    if args.cost is not None and args.cost <= 0:
        raise UsageError("--cost must be more than 0 dollars")
    async with acting(settings, args, writes=True) as access:
        ack = await access.keel.budget(
            args.session, tokens=args.tokens, cost_usd=args.cost, by=approver_name(args)
        )
    if args.json:
        print(json.dumps({"session": args.session, **ack.model_dump(mode="json")}))
        return EXIT_OK
    tokens = "no token budget" if ack.tokens is None else f"{ack.tokens:,} tokens"
    cost = "no cost budget" if ack.cost_usd is None else f"${ack.cost_usd:g}"
    print(f"session {args.session} may now spend {tokens} and {cost} in all")
    return EXIT_OK


def add_parser(sub: flags.Subparsers) -> None:
    """Add ``keel budget``."""
    cmd = sub.add_parser(
        "budget",
        help="raise a session's token or cost budget; a turn waiting on it goes on",
        description="Set the session's budget from now on (what all its turns may spend).",
    )
    cmd.add_argument("session", type=flags.session_id)
    cmd.add_argument("--tokens", type=int, metavar="N", help="the session's token budget")
    cmd.add_argument("--cost", type=float, metavar="DOLLARS", help="its cost budget")
    cmd.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    flags.mcp_flag(cmd, embedded=True)
    cmd.set_defaults(handler=cmd_budget)
