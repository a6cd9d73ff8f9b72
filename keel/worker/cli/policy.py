"""``keel policy SESSION [--json] [--revoke TOOL]``: a session's standing approvals.

A standing approval (``keel approve SESSION ID --always``) lets a tool's later calls in the
session run without asking. ``keel policy`` lists them, with what is left of their bounds
(``--max-uses``, ``--for``, ``--total``: uses left, expires in, total left; in ``--json``
``uses_left``, ``expires_in_s`` and ``total_left``, each only when the bound is set);
``--revoke TOOL`` ends one, so the tool's next call asks a person again. ``add_parser`` adds
its parser to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from keel.worker.settings import Settings


async def cmd_policy(args: argparse.Namespace, settings: Settings) -> int:
    """``keel policy``: list the standing approvals, or revoke one."""
    import getpass

    from keel.worker.cli.session_access import existing_session, reading_session
    from keel.worker.shell import command
    from keel.workflows.standing import describe
    from keel.workflows.standing_bounds import bounded, describe_left, left

    if args.revoke is not None:
        by = args.approver or getattr(args, "approver_default", None) or getpass.getuser()
        async with existing_session(
            settings, args.session, writes=True, wait_for_worker=True
        ) as access:
            ack = await access.keel.revoke(args.session, args.revoke, by=by)
            standing = await access.keel.policy(args.session)
        print(f"revoked the standing approval of {ack.revoked.tool}: its next call asks again")
    else:
        async with reading_session(settings, args.session, wait_for_worker=False) as access:
            standing = await access.keel.policy(args.session)
    now = datetime.now(UTC)
    if args.json:
        print(json.dumps({"session": args.session, "standing": [
            {**a.model_dump(mode="json"), **left(a, now)} for a in standing
        ]}))  # fmt: skip
        return EXIT_OK
    if not standing:
        print("no standing approvals: every gated tool asks a person")
        return EXIT_OK
    for approval in standing:
        by = f", by {approval.granted_by}" if approval.granted_by else ""
        signed = f" (key {approval.key_fingerprint})" if approval.key_fingerprint else ""
        print(f"{approval.tool}: {describe(approval.when)}{by}{signed}")
        if bounded(approval):
            print(f"  {describe_left(approval, now)}")
        print(f"  {command('keel', 'policy', args.session, '--revoke', approval.tool)}")
    return EXIT_OK


def add_parser(sub: flags.Subparsers) -> None:
    """Add ``keel policy``."""
    cmd = sub.add_parser(
        "policy",
        help="list a session's standing approvals, or revoke one",
        description="Standing approvals (keel approve --always) let a tool's later calls run "
        "without asking; --revoke TOOL makes its next call ask again.",
    )
    cmd.add_argument("session", type=flags.session_id)
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.add_argument("--revoke", metavar="TOOL", help="end the standing approval of TOOL")
    cmd.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
    cmd.set_defaults(handler=cmd_policy)
