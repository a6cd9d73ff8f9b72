"""``keel deploy``: releasing new code to versioned workers without breaking sessions.

- ``keel deploy check`` replays the open sessions' histories against the code installed here
  (``keel.worker.process.replay_check``) and exits 1 naming the sessions it would break;
- ``keel deploy status NAME`` shows a Worker Deployment's versions, which one is current or
  ramping, and how many open sessions each still has;
- ``keel deploy promote NAME ID [--ramp PERCENT]`` makes a version current, or ramping.

They use the usual connection settings (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, TLS,
API key) and never embed a dev server. See docs/deployment.md, "Releasing new code".
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from typing import IO, TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.settings import Settings

_BAR_WIDTH = 30
_REDRAW_S = 0.1


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """``keel deploy status [NAME]``: versions, routing, open sessions per version."""
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.deployments import deployment_status
    from keel.worker.process.configured import connect_configured

    name = args.deployment or settings.deployment
    if not name:
        raise UsageError("name the deployment: keel deploy status NAME (or set KEEL_DEPLOYMENT)")
    client, _ = await connect_configured(settings)
    status = await deployment_status(client, name)
    routing = status.routing
    if args.json:
        print(
            json.dumps(
                {
                    "deployment": status.name,
                    "current": routing.current,
                    "ramping": routing.ramping,
                    "ramp_percent": routing.ramp_percent if routing.ramping else None,
                    "versions": [
                        {
                            "build_id": v.build_id,
                            "state": v.state,
                            "temporal_status": v.temporal_status,
                            "open_sessions": v.open_sessions,
                            "open_workflows": v.open_workflows,
                            "drained": v.drained,
                            "created": v.created.isoformat() if v.created else None,
                        }
                        for v in status.versions
                    ],
                }
            )
        )
        return EXIT_OK
    ramp = f", ramping {routing.ramping} at {routing.ramp_percent:g}%" if routing.ramping else ""
    print(f"deployment {status.name}: current {routing.current or '(none)'}{ramp}")
    rows = [("BUILD ID", "STATE", "OPEN SESSIONS", "OPEN WORKFLOWS", "FIRST SEEN")]
    for v in status.versions:
        state = f"ramping {routing.ramp_percent:g}%" if v.state == "ramping" else v.state
        seen = v.created.strftime("%Y-%m-%d %H:%M:%S") if v.created else "-"
        rows.append((v.build_id, state, str(v.open_sessions), str(v.open_workflows), seen))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    return EXIT_OK


async def cmd_promote(args: argparse.Namespace, settings: Settings) -> int:
    """``keel deploy promote NAME ID [--ramp PERCENT]``: route new sessions to a version."""
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.deployments import promote
    from keel.worker.process.configured import connect_configured

    ramp = args.ramp
    if ramp is not None and not 0 <= ramp <= 100:
        raise UsageError(f"--ramp {ramp:g}: a percentage from 0 to 100")
    client, _ = await connect_configured(settings)
    routing = await promote(client, args.deployment, args.build_id, ramp_percent=ramp)
    if ramp is None:
        print(f"{args.deployment}: {args.build_id} is current; new sessions start on it")
    else:
        print(
            f"{args.deployment}: {args.build_id} is ramping with {ramp:g}% of new sessions; "
            f"current is {routing.current or '(none)'}"
        )
    print(f"watch the older versions drain: keel deploy status {args.deployment}", file=sys.stderr)
    return EXIT_OK


async def cmd_check(args: argparse.Namespace, settings: Settings) -> int:
    """``keel deploy check``: replay open sessions against this code; exit 1 if any breaks."""
    from keel.activities.tools import load_tool_modules
    from keel.worker.cli.run_inputs import UsageError, tool_modules
    from keel.worker.process.replay_check import check_sessions
    from keel.worker.process.configured import connect_configured
    from keel.workflows.session import AgentSession

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.lanes < 1:
        raise UsageError("--lanes must be at least 1")
    load_tool_modules(tool_modules(args.tools))
    workflows = [_workflow_class(spec) for spec in args.workflow] or [AgentSession]
    keyring = settings.keyring()
    client, address = await connect_configured(settings)
    bar = _ProgressBar(sys.stderr)
    report = await check_sessions(
        client,
        workflows=workflows,
        query=args.query or None,
        limit=args.limit,
        keyring=keyring,
        lanes=args.lanes,
        on_progress=bar.show,
    )
    bar.close()
    failing = report.failing
    breaks = [c for c in failing if c.outcome == "breaks"]
    errors = [c for c in failing if c.outcome == "error"]
    if args.json:
        print(
            json.dumps(
                {
                    "namespace": client.namespace,
                    "checked": len(report.checks),
                    "seconds": round(report.seconds, 3),
                    "ok": len(report.checks) - len(failing),
                    "breaks": [c.session_id for c in breaks],
                    "errors": [c.session_id for c in errors],
                    "sessions": [
                        {
                            "session": c.session_id,
                            "run_id": c.run_id,
                            "outcome": c.outcome,
                            "detail": c.detail,
                        }
                        for c in report.checks
                    ],
                }
            )
        )
    else:
        for check in report.checks:
            detail = f"  {check.detail}" if check.detail else ""
            print(f"{_LABELS[check.outcome]}  {check.session_id}{detail}")
        where = f"namespace {client.namespace} at {address}"
        print(
            f"checked {len(report.checks)} sessions of {where} in {report.seconds:.2f} s: "
            f"{len(report.checks) - len(failing)} ok, {len(breaks)} would break, "
            f"{len(errors)} could not be checked"
        )
        if breaks:
            print("would break: " + " ".join(c.session_id for c in breaks))
        if errors:
            print("could not be checked: " + " ".join(c.session_id for c in errors))
    return EXIT_FAILED if failing else EXIT_OK


_LABELS = {"ok": "ok    ", "breaks": "BREAKS", "error": "ERROR "}


def _workflow_class(spec: str) -> type:
    """``module:Class`` of a ``--workflow`` flag, imported."""
    from keel.worker.cli.run_inputs import UsageError

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"--workflow {spec!r}: give MODULE:CLASS")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise UsageError(f"--workflow {spec!r}: {err}") from err
    if not isinstance(value, type) or not hasattr(value, "__temporal_workflow_definition"):
        raise UsageError(f"--workflow {spec!r} is not a @workflow.defn class")
    return value


class _ProgressBar:
    """``checking [#####-----] 12/40`` on stderr, redrawn in place at most 10 times a second."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.drawn = 0.0
        self.last: tuple[int, int] | None = None

    def show(self, done: int, total: int) -> None:
        self.last = (done, total)
        now = time.monotonic()
        if done < total and now - self.drawn < _REDRAW_S:
            return
        self.drawn = now
        filled = _BAR_WIDTH * done // total if total else _BAR_WIDTH
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.stream.write(f"\rchecking [{bar}] {done}/{total}")
        self.stream.flush()

    def close(self) -> None:
        if self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


def add_parser(sub: flags.Subparsers) -> None:
    """``keel deploy check``, ``status`` and ``promote``, on ``keel``'s subparsers."""
    deploy = sub.add_parser(
        "deploy",
        help="release new code: check open sessions, promote a version, watch drains",
        description="Release new code to versioned workers (keel worker --deployment NAME "
        "--build-id ID) without breaking sessions: check, promote, watch the old versions "
        "drain. See docs/deployment.md, Releasing new code.",
    )
    commands = deploy.add_subparsers(dest="deploy_command", required=True)

    check = commands.add_parser(
        "check",
        help="replay open sessions' histories against the code installed here",
        description="Fetch the histories of open sessions and replay them against the "
        "workflow code installed here, in parallel; print ok or the first mismatch of each; "
        "exit 1 if any would break (or could not be checked).",
    )
    check.add_argument(
        "--query",
        default='ExecutionStatus="Running"',
        help="visibility query of the sessions to check (default: "
        "'ExecutionStatus=\"Running\"'; '' for all)",
    )
    check.add_argument("--limit", type=int, help="check at most N sessions, newest first")
    check.add_argument(
        "--tools", help="tool modules the workers load (their policies run in sessions)"
    )
    check.add_argument(
        "--workflow",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="replay with this workflow class instead of Keel's AgentSession, and check the "
        "executions of its type (repeatable)",
    )
    check.add_argument(
        "--lanes", type=int, default=4, help="histories fetched and replayed at once (default 4)"
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(handler=cmd_check)

    status = commands.add_parser(
        "status",
        help="a deployment's versions, current and ramping, open sessions per version",
    )
    status.add_argument(
        "deployment", nargs="?", metavar="NAME", help="the deployment (default KEEL_DEPLOYMENT)"
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=cmd_status)

    promote = commands.add_parser(
        "promote",
        help="make a version current, or ramping with a share of new sessions",
    )
    promote.add_argument("deployment", metavar="NAME", help="the deployment")
    promote.add_argument("build_id", metavar="ID", help="the version's build id")
    promote.add_argument(
        "--ramp",
        type=float,
        metavar="PERCENT",
        help="send this percentage of new sessions to it instead of making it current",
    )
    promote.set_defaults(handler=cmd_promote)
