"""``keel deploy``: releasing new code to versioned workers without breaking sessions.

- ``keel deploy check`` replays the open sessions' histories against the code installed here
  (``keel.worker.process.replay_check``) and exits 1 naming the sessions it would break; it
  also reports what each recorded that the installed tools or agent file changed
  (``keel.worker.process.drift``);
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
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_FAILED, EXIT_OK
from keel.worker.cli.progress_bar import ProgressBar

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.activities.store.encrypted import Keyring
    from keel.worker.process.drift import DriftCheck
    from keel.worker.settings import Settings


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
    """``keel deploy check``: replay open sessions against this code, and report their drift.

    Exit 1 if any session would break or could not be checked; with ``--strict``, also if
    any drifted.
    """
    from keel.activities.tools import load_tool_modules
    from keel.worker.cli.run_inputs import UsageError, tool_modules
    from keel.worker.process.configured import connect_configured
    from keel.worker.process.replay_check import check_sessions
    from keel.workflows.session import AgentSession

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.lanes < 1:
        raise UsageError("--lanes must be at least 1")
    if args.all_task_queues and args.task_queue:
        raise UsageError("give --task-queue Q or --all-task-queues, not both")
    modules = load_tool_modules(tool_modules(args.tools))
    workflows = [_workflow_class(spec) for spec in args.workflow] or [AgentSession]
    keyring = settings.keyring()
    drift = _drift_check(args, settings, modules, keyring)
    task_queue = None if args.all_task_queues else args.task_queue
    if task_queue is None and not args.all_task_queues:
        task_queue = settings.task_queue
    client, address = await connect_configured(settings)
    if not modules:
        print("tool drift not checked: give --tools the modules the workers load", file=sys.stderr)
    bar = ProgressBar(sys.stderr, "checking")
    report = await check_sessions(
        client,
        workflows=workflows,
        query=args.query or None,
        limit=args.limit,
        keyring=keyring,
        lanes=args.lanes,
        on_progress=bar.show,
        task_queue=task_queue or None,
        deployment=args.deployment or None,
        drift=drift,
    )
    bar.close()
    failing = report.failing
    breaks = [c for c in failing if c.outcome == "breaks"]
    errors = [c for c in failing if c.outcome == "error"]
    drifted = report.drifted
    if args.json:
        print(
            json.dumps(
                {
                    "namespace": client.namespace,
                    "task_queue": task_queue or None,
                    "deployment": args.deployment or None,
                    "checked": len(report.checks),
                    "seconds": round(report.seconds, 3),
                    "ok": len(report.checks) - len(failing),
                    "breaks": [c.session_id for c in breaks],
                    "errors": [c.session_id for c in errors],
                    "drifted": len(drifted),
                    "sessions": [
                        {
                            "session": c.session_id,
                            "run_id": c.run_id,
                            "outcome": c.outcome,
                            "detail": c.detail,
                            "drift": [
                                {
                                    "kind": d.kind,
                                    "tool": d.tool,
                                    "detail": d.detail,
                                    "level": d.level,
                                }
                                for d in c.drift
                            ],
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
            for d in check.drift:
                tool = f"{d.tool}: " if d.tool else ""
                print(f"        {d.level:<5}  {d.kind}  {tool}{d.detail}")
        scope = [f"task queue {task_queue}" if task_queue else "every task queue"]
        if args.deployment:
            scope.append(f"deployment {args.deployment}")
        where = f"namespace {client.namespace} at {address} ({', '.join(scope)})"
        print(
            f"checked {len(report.checks)} sessions of {where} in {report.seconds:.2f} s: "
            f"{len(report.checks) - len(failing)} ok, {len(breaks)} would break, "
            f"{len(errors)} could not be checked; {len(drifted)} drifted"
        )
        if breaks:
            print("would break: " + " ".join(c.session_id for c in breaks))
        if errors:
            print("could not be checked: " + " ".join(c.session_id for c in errors))
        if drifted:
            print("drifted: " + " ".join(c.session_id for c in drifted))
    if failing or (args.strict and drifted):
        return EXIT_FAILED
    return EXIT_OK


def _drift_check(
    args: argparse.Namespace, settings: Settings, modules: list[str], keyring: Keyring | None
) -> DriftCheck:
    """What the sessions' recordings are compared with: ``--tools``, ``--agent``, the store."""
    from pathlib import Path

    from keel.activities.store import open_store
    from keel.worker.cli.run_inputs import read_agent
    from keel.worker.process.drift import DriftCheck

    agent = read_agent(args.agent, settings.model)
    spec = settings.store
    reachable = spec.startswith("s3://") or Path(spec.removeprefix("dir:")).is_dir()
    return DriftCheck(
        modules=modules,
        agent=agent.config if agent is not None else None,
        agent_name=args.agent or "the agent file",
        store=open_store(spec, keyring) if reachable and modules else None,
    )


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
        help="replay open sessions' histories against the code installed here, report drift",
        description="Fetch the histories of open sessions (of the workers' task queue) and "
        "replay them against the workflow code installed here, in parallel; print ok or the "
        "first mismatch of each, and what each recorded that the tools (--tools) or the agent "
        "file (--agent) installed here changed: drift. Exit 1 if any would break (or could "
        "not be checked), or with --strict drifted.",
    )
    check.add_argument(
        "--query",
        default='ExecutionStatus="Running"',
        help="visibility query of the sessions to check (default: "
        "'ExecutionStatus=\"Running\"'; '' for all)",
    )
    check.add_argument("--limit", type=int, help="check at most N sessions, newest first")
    check.add_argument(
        "--task-queue",
        metavar="Q",
        help="check the sessions of this task queue (default: the workers', KEEL_TASK_QUEUE, "
        "else keel; '' for every one)",
    )
    check.add_argument(
        "--all-task-queues", action="store_true", help="check the sessions of every task queue"
    )
    check.add_argument(
        "--deployment",
        metavar="NAME",
        help="check only the sessions of this Worker Deployment (any of its versions)",
    )
    check.add_argument(
        "--agent",
        metavar="FILE.toml",
        help="compare the sessions' system prompt and settings with this agent file's",
    )
    check.add_argument("--strict", action="store_true", help="exit 1 when any session drifted, too")
    check.add_argument(
        "--tools",
        help="tool modules the workers load (their policies run in sessions; their tools are "
        "compared with what sessions recorded)",
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
