"""The price of quick crash recovery by heartbeats, legacy timeouts against issue 23's.

Issue 23 had Keel notice a dead worker through its activities' missing heartbeats (a 2 s
heartbeat timeout, three beats per timeout; ``--heartbeat-timeout`` tries another) and move a
dead worker's sessions off its sticky queue after 1 s; the ``new`` side keeps that 2 s (Keel's
default is 30 s since issue 45, the in-flight journal giving a dead worker's calls back
instead: docs/performance.md, "Recovery against heartbeats"). Before issue 23 both were 10 s
(``legacy``: 10 s heartbeat timeout, a model call beating every second and a tool every
3.3 s, a 10 s sticky queue). This runs the same N sessions under each setting in alternating
rounds (legacy, new, legacy, new...) against one dev server, and prints for each phase the
legacy figure, the new one and new / legacy:

- ``heartbeat_rpcs_per_activity_s[PHASE]``: ``RecordActivityTaskHeartbeat`` requests the
  server's frontend counted (its own metric), per second and per running activity;
- ``running_activities[PHASE]``: how many of the phase's activities ran, on average (N when
  every session was in it for the whole window);
- ``server_cpu_cores[PHASE]``: the dev server's CPU seconds per second of the window while
  the N sessions' activities run (phase ``model``: all in a model call; ``tool``: all in a
  tool run);
- ``worker_cpu_cores[PHASE]``: likewise for the worker (this process);
- ``server_cpu_us_per_heartbeat``: the server CPU the extra heartbeats cost, per heartbeat;
- ``lost_attempts[hold]`` / ``[cycles]``: activity attempts started again although no worker
  died (a heartbeat timeout from a late beat), in each phase;
- ``failed_turns``: turns that did not start or complete (must be 0);
- ``sticky_timeouts[cycles]``: in a phase of quick tool cycles (``--cycle-sessions``
  sessions), workflow tasks that waited out
  the sticky queue's timeout and moved to the shared queue (each costs a replay of the
  session's history on whichever worker takes it).

Usage::

    python -m tests.benchmarks.heartbeats [--sessions 200] [--start-rate 20] [--hold 40]
        [--window 8] [--rounds 2] [--cycle-sessions 50] [--cycles 3] [--heartbeat-timeout 1]

Sessions start ``--start-rate`` a second (a storm of starts on one worker is a load test of
its own); the windows open once every session's model call, then tool, runs.

Figures are medians over the rounds. The dev server runs in memory, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from keel import ConversationStore, KeelClient, SessionConfig, connect, open_store
from keel.worker.process.assembly import build_worker
from keel.worker.server.devserver import DevServer
from keel.worker.settings import DEFAULT_STICKY_TIMEOUT_S
from keel.workflows.activity_options import (
    LEGACY_HEARTBEAT_TIMEOUT,
    MODEL_ACTIVITY,
    TOOL_ACTIVITY,
)
from tests.benchmarks.process_stats import cpu_seconds
from tests.benchmarks.server import bench_server
from tests.helpers.scripts import write_script
from tests.helpers.temporal import free_port

TOOLS = "tests.sample_tools"
MODES = ("legacy", "new")
PHASES = {"model": MODEL_ACTIVITY, "tool": TOOL_ACTIVITY}
HEARTBEAT_METRIC = 'operation="RecordActivityTaskHeartbeat"'
SAMPLE_EVERY_S = 0.1


@dataclass(frozen=True)
class Mode:
    """One side of the comparison: the session's heartbeat timeout, the worker's options."""

    name: str
    heartbeat_timeout_s: float
    sticky_timeout_s: float
    heartbeat_throttle_s: float | None  # None: Keel's (build_worker's) default


# Issue 23's heartbeat timeout (Keel's default until issue 45): the ``new`` side.
FAST_HEARTBEAT_TIMEOUT_S = 2.0

MODE_SETTINGS = {
    "legacy": Mode("legacy", LEGACY_HEARTBEAT_TIMEOUT.total_seconds(), 10.0, 1.0),
    "new": Mode("new", FAST_HEARTBEAT_TIMEOUT_S, DEFAULT_STICKY_TIMEOUT_S, None),
}


@dataclass
class Window:
    """What one measuring window saw."""

    heartbeats: float
    activity_s: float  # running activities (of any kind) integrated over the window
    phase_activity_s: float  # the phase's kind only
    wall_s: float
    server_cpu_s: float
    worker_cpu_s: float


@dataclass
class Round:
    """One mode's figures in one round."""

    mode: str
    windows: dict[str, Window] = field(default_factory=dict)
    lost_attempts: int = 0
    lost_in_cycles: int = 0
    sticky_timeouts: int = 0
    cycles_wall_s: float = 0.0
    failed_turns: int = 0


class RunningActivities(Interceptor):
    """Counts the activities running on the worker, by type, and attempts after the first."""

    def __init__(self) -> None:
        """Nothing runs yet."""
        self.running: Counter[str] = Counter()
        self.retries = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap the activity's execution with the count."""
        return _Counted(next, self)


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: RunningActivities) -> None:
        super().__init__(next)
        self._owner = owner

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.attempt > 1:
            self._owner.retries += 1
        self._owner.running[info.activity_type] += 1
        try:
            return await self.next.execute_activity(input)
        finally:
            self._owner.running[info.activity_type] -= 1


class MetricsServer(DevServer):
    """The benchmark's dev server, serving its Prometheus metrics on a known port."""

    def __init__(self, data_dir: Path) -> None:
        """In memory, headless, quiet (as ``bench_server``), metrics on a free port."""
        plain = bench_server("memory", data_dir, ())
        super().__init__(
            data_dir,
            ui=False,
            log_level=plain.log_level,
            startup_timeout_s=plain.startup_timeout_s,
            in_memory=True,
        )
        self.metrics_port = free_port()

    def _command(self, cli: str) -> list[str]:
        return [*super()._command(cli), "--metrics-port", str(self.metrics_port)]

    def heartbeats(self) -> float:
        """``RecordActivityTaskHeartbeat`` requests the frontend has counted so far."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our server
            text = response.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("service_requests{")
            and HEARTBEAT_METRIC in line
            and 'service_name="frontend"' in line
        )


class Bench:
    """Rounds of the same sessions under each mode, against one server."""

    def __init__(
        self, server: MetricsServer, client: Client, workdir: Path, args: argparse.Namespace
    ) -> None:
        """Keep what every round needs."""
        self.server = server
        self.client = client
        self.workdir = workdir
        self.sessions: int = args.sessions
        self.hold_s: float = args.hold
        self.window_s: float = args.window
        self.cycles: int = args.cycles
        self.cycle_sessions: int = args.cycle_sessions
        self.start_rate: float = args.start_rate
        self.store: ConversationStore = open_store(str(workdir / "store"))

    async def round(self, mode: Mode) -> Round:
        """Hold phases of N sessions, then a phase of quick cycles, under ``mode``."""
        result = Round(mode.name)
        counter = RunningActivities()
        queue = f"hb-{mode.name}-{uuid.uuid4().hex[:6]}"
        slots = 2 * self.sessions + 10
        options: dict[str, Any] = {
            "max_concurrent_activities": slots,
            "activity_executor": ThreadPoolExecutor(max_workers=slots),
            "sticky_queue_schedule_to_start_timeout": timedelta(seconds=mode.sticky_timeout_s),
            "interceptors": [counter],
        }
        if mode.heartbeat_throttle_s is not None:
            options["max_heartbeat_throttle_interval"] = timedelta(
                seconds=mode.heartbeat_throttle_s
            )
        keel = KeelClient(self.client, queue, self.store)
        async with build_worker(self.client, queue, [TOOLS], store=self.store, **options):
            turns = await self._start(keel, mode, self._hold_script(mode), self.sessions)
            for phase, kind in PHASES.items():
                await self._until_running(counter, kind)
                result.windows[phase] = await self._window(counter, kind)
            result.failed_turns += await self._finish(keel, turns, self.sessions)
            result.lost_attempts = counter.retries
            started = time.monotonic()
            count = self.cycle_sessions
            turns = await self._start(keel, mode, self._cycles_script(mode), count)
            result.failed_turns += await self._finish(keel, turns, count)
            result.cycles_wall_s = time.monotonic() - started
            result.sticky_timeouts = sum(await asyncio.gather(*(self._sticky(s) for s in turns)))
        result.lost_in_cycles = counter.retries - result.lost_attempts
        return result

    def _hold_script(self, mode: Mode) -> SessionConfig:
        hold = self.hold_s
        responses = [
            {
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "h1",
                            "name": "slow",
                            "input": {"seconds": hold, "label": "x"},
                        }
                    }
                ],
                "stopReason": "tool_use",
                "usage": {"inputTokens": 1, "outputTokens": 1},
                "delay_s": hold,
            },
            {"content": [{"text": "done"}], "stopReason": "end_turn", "usage": {}},
        ]
        return self._config(mode, f"hold-{mode.name}", responses)

    def _cycles_script(self, mode: Mode) -> SessionConfig:
        responses: list[dict[str, Any]] = [
            {
                "content": [
                    {"toolUse": {"toolUseId": f"e{i}", "name": "echo", "input": {"text": "x"}}}
                ],
                "stopReason": "tool_use",
                "usage": {"inputTokens": 1, "outputTokens": 1},
            }
            for i in range(self.cycles)
        ]
        responses.append({"content": [{"text": "done"}], "stopReason": "end_turn", "usage": {}})
        return self._config(mode, f"cycles-{mode.name}", responses)

    def _config(self, mode: Mode, name: str, responses: list[dict[str, Any]]) -> SessionConfig:
        return SessionConfig(
            model=write_script(self.workdir / f"{name}.json", responses),
            tool_modules=[TOOLS],
            heartbeat_timeout_s=mode.heartbeat_timeout_s,
        )

    async def _start(
        self, keel: KeelClient, mode: Mode, config: SessionConfig, count: int
    ) -> dict[str, int]:
        """Start ``count`` sessions, ``start_rate`` a second; their turn ids by session."""
        ids = [f"hb-{mode.name}-{uuid.uuid4().hex[:10]}" for _ in range(count)]

        async def one(session: str, delay_s: float) -> int | None:
            await asyncio.sleep(delay_s)
            try:
                return (await keel.prompt(session, "go", config=config)).turn_id
            except Exception:  # noqa: BLE001 - a session that did not start: counted
                return None

        turns = await asyncio.gather(*(one(s, i / self.start_rate) for i, s in enumerate(ids)))
        return {s: t for s, t in zip(ids, turns, strict=True) if t is not None}

    async def _finish(self, keel: KeelClient, turns: dict[str, int], count: int) -> int:
        """Wait for every session's turn; how many did not complete."""

        async def one(session: str, turn: int) -> bool:
            deadline = time.monotonic() + 4 * self.hold_s + 300
            while True:  # a query that times out on a busy worker says nothing of the turn
                try:
                    record = await keel.wait_turn(session, turn, timeout_s=30)
                except Exception:  # noqa: BLE001 - asked again until the deadline
                    if time.monotonic() > deadline:
                        return False
                    continue
                return record.status == "completed"

        done = await asyncio.gather(*(one(s, t) for s, t in turns.items()))
        return (count - len(turns)) + done.count(False)

    async def _until_running(self, counter: RunningActivities, kind: str) -> None:
        """Until every session runs ``kind``, or as many as will before the hold ends."""
        deadline = time.monotonic() + self.hold_s / 2
        while counter.running[kind] < self.sessions and time.monotonic() < deadline:
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def _window(self, counter: RunningActivities, kind: str) -> Window:
        beats = await asyncio.to_thread(self.server.heartbeats)
        pid = self.server.pid
        assert pid is not None
        server_cpu, worker_cpu = cpu_seconds(pid), time.process_time()
        started = last = time.monotonic()
        activity_s = phase_s = 0.0
        while last - started < self.window_s:
            await asyncio.sleep(SAMPLE_EVERY_S)
            now = time.monotonic()
            activity_s += sum(counter.running.values()) * (now - last)
            phase_s += counter.running[kind] * (now - last)
            last = now
        return Window(
            heartbeats=await asyncio.to_thread(self.server.heartbeats) - beats,
            activity_s=activity_s,
            phase_activity_s=phase_s,
            wall_s=last - started,
            server_cpu_s=cpu_seconds(pid) - server_cpu,
            worker_cpu_s=time.process_time() - worker_cpu,
        )

    async def _sticky(self, session: str) -> int:
        """Workflow tasks of the session that timed out waiting on a sticky queue."""
        history = await self.client.get_workflow_handle(session).fetch_history()
        return sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            and e.workflow_task_timed_out_event_attributes.timeout_type
            == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        )


def figures(rounds: list[Round]) -> list[str]:
    """``figure value unit`` lines: legacy, new and new / legacy for each figure."""
    by_mode = {m: [r for r in rounds if r.mode == m] for m in MODES}

    def med(mode: str, value: Any) -> float:
        return statistics.median(value(r) for r in by_mode[mode])

    lines: list[str] = []

    def row(name: str, unit: str, value: Any, digits: int = 2) -> None:
        old, new = med("legacy", value), med("new", value)
        lines.append(f"{name}[legacy] {old:.{digits}f} {unit}")
        lines.append(f"{name}[new] {new:.{digits}f} {unit}")
        ratio = new / old if old else float("inf") if new else 1.0
        lines.append(f"{name}[new/legacy] {ratio:.2f} x")

    for phase in PHASES:
        row(
            f"heartbeat_rpcs_per_activity_s[{phase}]",
            "/s",
            lambda r, p=phase: r.windows[p].heartbeats / max(r.windows[p].activity_s, 1e-9),
        )
        row(
            f"server_cpu_cores[{phase}]",
            "cores",
            lambda r, p=phase: r.windows[p].server_cpu_s / r.windows[p].wall_s,
            3,
        )
        row(
            f"worker_cpu_cores[{phase}]",
            "cores",
            lambda r, p=phase: r.windows[p].worker_cpu_s / r.windows[p].wall_s,
            3,
        )
        row(
            f"running_activities[{phase}]",
            "activities",
            lambda r, p=phase: r.windows[p].phase_activity_s / r.windows[p].wall_s,
            0,
        )
    for phase in PHASES:
        extra_cpu = med("new", lambda r, p=phase: r.windows[p].server_cpu_s) - med(
            "legacy", lambda r, p=phase: r.windows[p].server_cpu_s
        )
        extra_beats = med("new", lambda r, p=phase: r.windows[p].heartbeats) - med(
            "legacy", lambda r, p=phase: r.windows[p].heartbeats
        )
        if extra_beats > 0:
            lines.append(
                f"server_cpu_us_per_heartbeat[{phase}] {extra_cpu / extra_beats * 1e6:.0f} us"
            )
    row("lost_attempts[hold]", "attempts", lambda r: r.lost_attempts, 0)
    row("lost_attempts[cycles]", "attempts", lambda r: r.lost_in_cycles, 0)
    row("sticky_timeouts[cycles]", "tasks", lambda r: r.sticky_timeouts, 0)
    row("cycles_wall_s", "s", lambda r: r.cycles_wall_s)
    row("failed_turns", "turns", lambda r: r.failed_turns, 0)
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    """Start the server, run the rounds, return the figure lines."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with MetricsServer(workdir / "server") as server:
            client = await connect(server.address, "default")
            bench = Bench(server, client, workdir, args)
            rounds = []
            for _ in range(args.rounds):
                for mode in MODES:
                    setting = MODE_SETTINGS[mode]
                    if mode == "new":
                        setting = replace(setting, heartbeat_timeout_s=args.heartbeat_timeout)
                    rounds.append(await bench.round(setting))
    header = (
        f"# {args.sessions} sessions started {args.start_rate:g}/s, hold {args.hold:g} s, "
        f"window {args.window:g} s; {args.cycle_sessions} sessions of {args.cycles} quick "
        f"cycles; {args.rounds} round(s) of legacy then new (heartbeat timeout "
        f"{args.heartbeat_timeout:g} s)"
    )
    return [header, *figures(rounds)]


def parser() -> argparse.ArgumentParser:
    """The command line."""
    parse = argparse.ArgumentParser(description=__doc__)
    parse.add_argument("--sessions", type=int, default=200)
    parse.add_argument("--hold", type=float, default=40.0, help="model call and tool, s")
    parse.add_argument("--window", type=float, default=8.0, help="measuring window, s")
    parse.add_argument("--cycles", type=int, default=3, help="quick tool cycles per session")
    parse.add_argument("--cycle-sessions", type=int, default=50, help="sessions of quick cycles")
    parse.add_argument("--start-rate", type=float, default=20.0, help="sessions started a second")
    parse.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=FAST_HEARTBEAT_TIMEOUT_S,
        help="the new side's heartbeat timeout (default 2, issue 23's)",
    )
    parse.add_argument("--rounds", type=int, default=2)
    return parse


def main() -> None:
    """Run and print."""
    for line in asyncio.run(run(parser().parse_args())):
        print(line)


if __name__ == "__main__":
    main()
