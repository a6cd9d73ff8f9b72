"""``keel schedule``: Temporal Schedules that start a one-turn session at each firing.

``create``, ``list``, ``describe``, ``pause``, ``unpause``, ``trigger``, ``delete``; each a
coroutine ``(args, settings) -> exit code``. The schedules live in Temporal, so every command
needs a server that outlives it (``keel dev``, or ``TEMPORAL_ADDRESS``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from keel.worker.cli.console import EXIT_OK
from keel.worker.cli.flags import Subparsers, add_session_flags

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.client.schedules import KeelSchedules, ScheduleSummary
    from keel.worker.settings import Settings

# ``--overlap``: the names of ``keel.worker.client.schedules.OVERLAP_POLICIES``.
OVERLAPS = ("allow", "buffer", "skip")
# ``--every``: a number and a unit, repeated: 90s, 5m, 1h30m, 1d.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(s|m|h|d)")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A schedule's name: the prefix of its sessions' ids.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def parse_duration(text: str, flag: str = "--every") -> timedelta:
    """``--every``'s value (and ``keel approve --for``'s): ``90s``, ``5m``, ``1h30m``, ``1d``.

    At least one second.

    Raises:
        UsageError: not such a duration, naming ``flag``.
    """
    from keel.worker.cli.run_inputs import UsageError

    value = text.strip().lower()
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise UsageError(f"{flag} {text!r}: expected a duration such as 30s, 5m, 1h30m or 1d")
    every = timedelta(seconds=sum(float(n) * _UNIT_S[u] for n, u in parts))
    if every < timedelta(seconds=1):
        if flag == "--every":
            raise UsageError(f"--every {text!r}: a schedule fires at most once a second")
        raise UsageError(f"{flag} {text!r}: at least one second")
    return every


def add_parser(sub: Subparsers) -> None:
    """``keel schedule ...`` and its subcommands, on the ``keel`` parser's subparsers."""
    schedule = sub.add_parser(
        "schedule",
        help="run a prompt on a schedule, each time in a new session",
        description="Temporal Schedules: each firing starts a session NAME-<time> that runs "
        "PROMPT for one turn. Needs `keel dev` or TEMPORAL_ADDRESS, and a worker.",
    )
    commands = schedule.add_subparsers(dest="schedule_command", metavar="command", required=True)

    create = commands.add_parser("create", help="create a schedule")
    create.add_argument("name", help="the schedule's name; its sessions' ids start with it")
    create.add_argument("prompt", nargs="+", help="the prompt every session runs")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="a cron expression, e.g. '0 2 * * *'")
    when.add_argument("--every", metavar="DURATION", help="an interval: 30s, 5m, 1h30m, 1d")
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone of --cron (default UTC)")
    create.add_argument(
        "--overlap",
        choices=OVERLAPS,
        default="skip",
        help="while the previous session still runs: skip the firing (default), allow both, "
        "or buffer one firing until it ends",
    )
    add_session_flags(create)
    create.add_argument("--json", action="store_true", help="print the schedule as JSON")
    create.set_defaults(handler=cmd_schedule_create)

    listing = commands.add_parser("list", help="list the schedules of this task queue")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(handler=cmd_schedule_list)

    describe = commands.add_parser("describe", help="a schedule, its next and recent firings")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(handler=cmd_schedule_describe)

    for name, text in (
        ("pause", "stop firing until unpaused"),
        ("unpause", "fire again"),
        ("delete", "delete a schedule (its sessions go on)"),
    ):
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("name")
        if name != "delete":
            cmd.add_argument("--note", help="why (shown by describe)")
        cmd.set_defaults(handler=cmd_schedule_change, change=name)

    trigger = commands.add_parser("trigger", help="fire now")
    trigger.add_argument("name")
    trigger.add_argument(
        "--overlap",
        choices=OVERLAPS,
        help="overlap policy for this firing (default: the schedule's)",
    )
    trigger.set_defaults(handler=cmd_schedule_change, change="trigger")


@asynccontextmanager
async def _schedules(settings: Settings, what: str) -> AsyncIterator[KeelSchedules]:
    from keel.worker.cli.session_access import require_lasting_server
    from keel.worker.client.schedules import KeelSchedules
    from keel.worker.server.connection import open_connection

    await require_lasting_server(settings, what)
    async with open_connection(settings, embed=False) as connection:
        yield KeelSchedules(connection.client, settings.task_queue)


async def cmd_schedule_create(args: argparse.Namespace, settings: Settings) -> int:
    """``keel schedule create NAME (--cron EXPR | --every DURATION) [flags] PROMPT``."""
    from keel.worker.cli.run_inputs import (
        UsageError,
        check_model_given,
        new_session_config,
        read_agent,
        sendable_model,
    )

    if not _NAME.match(args.name):
        raise UsageError(
            f"schedule name {args.name!r}: letters, digits, '_', '-' and '.', starting with a "
            "letter or digit"
        )
    prompt = " ".join(args.prompt).strip()
    if not prompt:
        raise UsageError("the prompt is empty")
    every = parse_duration(args.every) if args.every else None
    check_model_given(args.model, settings.model)
    agent = read_agent(args.agent, args.model or settings.model)
    model: str | None = args.model or (agent.config.model if agent else settings.model)
    config = new_session_config(args, model, agent)
    config = config.model_copy(update={"model": sendable_model(config.model)})
    async with _schedules(settings, "keel schedule create") as schedules:
        await schedules.create(
            args.name,
            prompt,
            config,
            cron=args.cron,
            every=every,
            overlap=args.overlap,
            time_zone=args.timezone,
        )
        summary = await schedules.describe(args.name)
    if args.json:
        print(json.dumps(schedule_json(summary)))
    else:
        print(f"schedule {args.name} created: {summary.spec}, overlap {args.overlap}")
        print(f"  next: {_when(summary.next_runs[0]) if summary.next_runs else '-'}")
        print(f"  sessions: {args.name}-<time>; see them with `keel sessions`")
    return EXIT_OK


async def cmd_schedule_list(args: argparse.Namespace, settings: Settings) -> int:
    """``keel schedule list``: the schedules of this task queue."""
    async with _schedules(settings, "keel schedule list") as schedules:
        found = await schedules.list()
    if args.json:
        print(json.dumps([schedule_json(s) for s in found]))
        return EXIT_OK
    if not found:
        print(f"no schedules on task queue {settings.task_queue!r}")
        return EXIT_OK
    rows = [("NAME", "WHEN", "STATE", "NEXT", "LAST SESSION")]
    for s in found:
        rows.append(
            (
                s.name,
                s.spec,
                "paused" if s.paused else "active",
                _when(s.next_runs[0]) if s.next_runs and not s.paused else "-",
                s.recent[-1][1] if s.recent else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]))
    return EXIT_OK


async def cmd_schedule_describe(args: argparse.Namespace, settings: Settings) -> int:
    """``keel schedule describe NAME``."""
    async with _schedules(settings, "keel schedule describe") as schedules:
        s = await schedules.describe(args.name)
    if args.json:
        print(json.dumps(schedule_json(s)))
        return EXIT_OK
    print(f"schedule {s.name}: {s.spec}, overlap {s.overlap}")
    print(f"  state:   {'paused' if s.paused else 'active'}" + (f" ({s.note})" if s.note else ""))
    print(f"  model:   {s.model}")
    print(f"  prompt:  {s.prompt}")
    print(f"  fired:   {s.fired} time(s), {s.skipped} skipped while the previous one ran")
    for at in s.next_runs[:3]:
        print(f"  next:    {_when(at)}")
    for at, session in s.recent:
        print(f"  fired:   {_when(at)} -> session {session}")
    for session in s.running or []:
        print(f"  running: {session}")
    return EXIT_OK


Change = Callable[["KeelSchedules", argparse.Namespace], Awaitable[None]]
# Each change: the command, what it does to a schedule, and how the command says it did.
_CHANGES: dict[str, tuple[Change, str]] = {
    "pause": (lambda s, a: s.pause(a.name, a.note), "paused"),
    "unpause": (lambda s, a: s.unpause(a.name, a.note), "unpaused"),
    "trigger": (lambda s, a: s.trigger(a.name, a.overlap), "triggered"),
    "delete": (lambda s, a: s.delete(a.name), "deleted"),
}


async def cmd_schedule_change(args: argparse.Namespace, settings: Settings) -> int:
    """``keel schedule pause|unpause|trigger|delete NAME``."""
    change, done = _CHANGES[args.change]
    async with _schedules(settings, f"keel schedule {args.change}") as schedules:
        await change(schedules, args)
    print(f"schedule {args.name} {done}")
    return EXIT_OK


def _when(at: datetime) -> str:
    return at.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def schedule_json(s: ScheduleSummary) -> dict[str, Any]:
    """A schedule as ``keel schedule list --json`` and ``describe --json`` print it."""
    return {
        "name": s.name,
        "spec": s.spec,
        "paused": s.paused,
        "note": s.note,
        "next_runs": [t.isoformat() for t in s.next_runs],
        "recent": [{"scheduled_at": t.isoformat(), "session": x} for t, x in s.recent],
        "running": s.running,
        "overlap": s.overlap,
        "prompt": s.prompt,
        "model": s.model,
        "fired": s.fired,
        "skipped": s.skipped,
    }
