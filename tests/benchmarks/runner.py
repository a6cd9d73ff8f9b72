"""Keel against the floor: every figure for both, in one run, on one dev server.

Starts its own Temporal dev server (``--persistence memory`` or ``sqlite``), one Keel worker
process and one floor worker process (``tests.benchmarks.worker``), and drives both from
this process. For each figure it prints three ``figure value unit`` lines: Keel's
(``keel.*``), the floor's (``floor.*``, ``tests.benchmarks.floor``: a hand-written loop of one
model activity and one tool activity per cycle, the full message list passed each time) and
the ratio Keel / floor (``ratio.*``). Lines starting with ``#`` say what ran where.

Figures (a cycle is one model call that asks for one tool, plus that tool run; the turn
ends with one more model call that answers with text):

- ``cycle_latency``: median over ``--repeats`` sessions of one turn of ``--latency-cycles``
  cycles, each alone on the worker: time between the first and the last model activity's
  scheduling (server clock) divided by the cycles.
- ``turn_wall_per_cycle``: the same sessions, client-measured start to result, per cycle.
- ``worker_cpu_per_cycle``: user + system CPU of the worker process (its CPU-time clock, in
  ns; ``/proc/PID/stat`` where there is none) per cycle, in the latency runs and in each
  throughput run.
- ``worker_cpu_per_cycle[cycles=C]``: the figure to compare CPU by. ``--cpu-rounds`` rounds
  (default 20), each running every system once in an order that rotates: a turn of C
  (``--cpu-cycles``, default 40) cycles and one of 0 cycles, differenced, over C. The median
  over the rounds; a ``#`` line per system gives the spread (lowest, quartiles, highest) and
  ``ratio_rounds.*`` the median of the round-by-round ratios.
- ``history_bytes_per_cycle[cycles=N]``: protobuf bytes of the session's history (every
  run) for N cycles, minus those of a session of 0 cycles (``history_bytes_fixed``), over N.
- ``throughput[sessions=S]``: S sessions of ``--throughput-cycles`` cycles, all started at
  once: cycles completed per second, first start to last result; the median of
  ``--throughput-repeats`` runs per system (default 4), taken in ABBA order (Keel, floor,
  floor, Keel, ...) so that a drift of the machine or the server does not favour either: with
  an even number, each system's median sits at the same place in time. Each run starts
  ``--settle`` seconds (default 12) after the previous one, so the server timers a run sets
  (10 s activity and workflow-task timeouts, which fire and find the work done) fire between
  runs, not in the next one. A ``#`` line lists every run in order. Beside it, the
  worker's CPU per cycle in those runs (median), and the dev server's
  (``server_cpu_per_cycle``; only when the runner started the server): on 2 cores, the two
  share the machine.
- ``replay[cycles=N]``: median time of ``Replayer.replay_workflow`` on the history of an
  N-cycle session (after one untimed warm-up replay); ``replay_cold`` is that first one.
- ``memory_per_cached_session``: fresh workers; ``--memory-steps`` steps (default 6) each add
  K (``--memory-sessions``) sessions per system that run a one-cycle turn and stay open in
  the worker's cache; the least-squares slope of worker RSS over the sessions held, through
  the readings after each step.
- ``parked_*``: ``tests.benchmarks.parked`` on this run's server: ``--parked`` N sessions
  (default 1,000) per side park on an approval, then are approved (the first quarter, at
  most 100, one at a time); its figures and ``#`` lines as that module prints them.
- ``cold_resume_*[cycles=C,can_events=N]``: ``tests.benchmarks.cold_resume`` on this run's
  server, Keel only: sessions of ``--cold-resume-cycles`` cycles (default 200) park on an
  approval, their worker is restarted, and each is approved alone: approve-to-done (median,
  max), the replay part, the events and runs of the session, at each continue-as-new size
  of ``--cold-resume-can-events`` (default 10,000, 3,000 (Keel's default) and 1,000).
- ``cycles_to_history_limit[50MB]``: the cycles of one turn whose history reaches Temporal's
  50 MiB limit, extrapolated from ``history_bytes_fixed`` and the per-cycle bytes at the two
  largest ``--history-cycles`` (``tests.benchmarks.peer.longest_turn`` states the formula).

``--peer strands`` adds a third system, the official Strands plugin
(``tests.benchmarks.peer``: its worker runs in a venv of its own, made on first use), to the
latency, history and memory figures: its lines are ``strands.*``, and ``ratio_strands.*`` is
Keel / Strands. Throughput and replay stay Keel against the floor.

The dev server runs with ``history.transferProcessorMaxPollRPS=1000`` unless
``--stock-server``: the stock setting makes every workflow task wait for a poll of the
server's transfer queue (at most 20 a second), about 50 ms per round trip for both systems.

Usage::

    python -m tests.benchmarks [--persistence memory|sqlite] [--stock-server]
        [--sessions 50 200] [--throughput-cycles 10] [--throughput-repeats 4] [--settle 12]
        [--latency-cycles 20] [--repeats 5] [--cpu-cycles 40] [--cpu-rounds 12]
        [--history-cycles 10 100 300] [--replay-cycles 200]
        [--memory-sessions 100] [--memory-steps 6] [--parked 1000]
        [--cold-resume-cycles 200] [--cold-resume-can-events 10000 3000 1000]
        [--cold-resume-repeats 3] [--keel-config FIELD=VALUE] [--keel-env NAME=VALUE]
        [--result-size 512] [--tool big_async|big] [--freeze-heap keel|both|none]
        [--dynamic-config-value KEY=VALUE] [--markdown FILE]
        [--profile DIR] [--peer strands [--peer-venv DIR]]

``--profile DIR`` samples each worker process with py-spy (Python frames holding the GIL,
250 Hz) into ``DIR/SYSTEM-PID.txt`` (collapsed stacks); ``python -m tests.benchmarks.stacks``
summarises them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import temporalio
from temporalio.client import Client, WorkflowHandle
from temporalio.client import WorkflowHistory as History
from temporalio.worker import Replayer

from keel.worker.payloads import DATA_CONVERTER
from keel.worker.server.devserver import DevServer, terminate
from tests.benchmarks.cold_resume import cold_resume, keel_replayer
from tests.benchmarks.floor import MODEL_ACTIVITY as FLOOR_MODEL
from tests.benchmarks.floor import WORKFLOW as FLOOR_WORKFLOW
from tests.benchmarks.floor import FloorLoop
from tests.benchmarks.parked import parked_side_by_side
from tests.benchmarks.peer import (
    HISTORY_LIMIT_BYTES,
    PEERS,
    Peer,
    default_venv,
    ensure_venv,
    longest_turn,
)
from tests.benchmarks.process_stats import cpu_seconds, rss_bytes
from tests.benchmarks.server import PERSISTENCE, bench_server, describe
from tests.helpers.scripts import write_script
from tests.helpers.temporal import run_histories

ROOT = Path(__file__).resolve().parents[2]
# The stock dev server polls its transfer queue at most 20 times a second, so every workflow
# task (and every activity not started eagerly) waits for the next poll: about 50 ms per
# round trip, the same for any worker, which hides what the workers themselves cost.
FAST_DISPATCH = "history.transferProcessorMaxPollRPS=1000"
SAMPLE_TOOLS = "tests.sample_tools"
# Keel's cycles call one of these sample tools; each returns a text of --result-size.
TOOLS = ("big_async", "big")
SYSTEMS = ("keel", "floor")
# The figure of Temporal's history size limit: cycles of one turn until 50 MiB of history.
CYCLES_TO_LIMIT = "cycles_to_history_limit[50MB]"


@dataclass
class Options:
    """What to measure and how much."""

    persistence: str = "memory"
    latency_cycles: int = 20
    repeats: int = 5
    cpu_cycles: int = 40
    cpu_rounds: int = 20
    history_cycles: list[int] = field(default_factory=lambda: [10, 100, 300])
    sessions: list[int] = field(default_factory=lambda: [50, 200])
    throughput_cycles: int = 10
    throughput_repeats: int = 4
    settle_s: float = 12.0
    replay_cycles: int = 200
    replay_repeats: int = 3
    memory_sessions: int = 100
    memory_steps: int = 6
    parked: int = 1000
    cold_resume_cycles: int = 200
    cold_resume_can_events: list[int] = field(default_factory=lambda: [10_000, 3_000, 1_000])
    cold_resume_repeats: int = 3
    keel_config: list[str] = field(default_factory=list)
    keel_env: list[str] = field(default_factory=list)
    result_size: int = 512
    tool: str = "big_async"
    freeze_heap: str = "keel"
    dynamic_config: list[str] = field(default_factory=list)
    stock_server: bool = False
    bytecode: bool = True
    markdown: Path | None = None
    profile: Path | None = None
    peer: str | None = None
    peer_venv: Path | None = None


@dataclass
class Figure:
    name: str
    unit: str
    keel: float | None = None
    floor: float | None = None
    paired: float | None = None  # a ratio measured pair by pair, not of the two figures
    peer: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.paired is not None:
            return self.paired
        if self.keel is None or not self.floor:
            return None
        return self.keel / self.floor

    @property
    def peer_ratio(self) -> float | None:
        """Keel / the peer."""
        if self.keel is None or not self.peer:
            return None
        return self.keel / self.peer


def fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"


class Report:
    """Figures as they are measured, printed as ``figure value unit`` lines."""

    def __init__(self, out: Callable[[str], None], peer: str | None = None) -> None:
        self.out = out
        self.peer = peer
        self.figures: dict[str, Figure] = {}
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.out(f"# {text}")

    def add(
        self,
        name: str,
        unit: str,
        keel: float | None,
        floor: float | None,
        peer: float | None = None,
    ) -> Figure:
        """Print Keel's, the floor's and the peer's figure, then Keel / floor and Keel / peer."""
        figure = Figure(name, unit, keel, floor, peer=peer)
        self.figures[name] = figure
        if keel is not None:
            self.out(f"keel.{name} {fmt(keel)} {unit}")
        if floor is not None:
            self.out(f"floor.{name} {fmt(floor)} {unit}")
        if peer is not None:
            self.out(f"{self.peer}.{name} {fmt(peer)} {unit}")
        if figure.ratio is not None:
            self.out(f"ratio.{name} {figure.ratio:.3f} x")
        if figure.peer_ratio is not None:
            self.out(f"ratio_{self.peer}.{name} {figure.peer_ratio:.3f} x")
        return figure

    def add_ratio(self, name: str, ratio: float) -> Figure:
        """A ratio of its own (say, the mean of ratios taken pair by pair): one line."""
        figure = Figure(name, "x", paired=ratio)
        self.figures[name] = figure
        self.out(f"ratio.{name} {ratio:.3f} x")
        return figure

    def markdown(self) -> str:
        def value(x: float | None, unit: str) -> str:
            return f"{fmt(x)} {unit}" if x is not None else "-"

        def ratio(x: float | None) -> str:
            return f"{x:.2f}" if x is not None else "-"

        if self.peer is None:
            rows = ["| figure | Keel | floor | Keel / floor |", "|---|---:|---:|---:|"]
        else:
            rows = [
                f"| figure | Keel | floor | {self.peer} | Keel / floor | Keel / {self.peer} |",
                "|---|---:|---:|---:|---:|---:|",
            ]
        for f in self.figures.values():
            cells = [f.name, value(f.keel, f.unit), value(f.floor, f.unit)]
            if self.peer is not None:
                cells.append(value(f.peer, f.unit))
            cells.append(ratio(f.ratio))
            if self.peer is not None:
                cells.append(ratio(f.peer_ratio))
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- processes


class WorkerProcess:
    """``python -m tests.benchmarks.worker SYSTEM ...`` (or ``entry ...``) as a child process."""

    def __init__(
        self,
        system: str,
        address: str,
        task_queue: str,
        env: dict[str, str] | None = None,
        profile: Path | None = None,
        entry: list[str] | None = None,
        **flags: Any,
    ):
        """A worker of ``system``; ``entry`` is its program and first arguments if not ours.

        Each of ``flags`` becomes ``--name value`` (``None`` leaves it out).
        """
        self.system = system
        self.env = env
        self.profile = profile
        self.profiler: asyncio.subprocess.Process | None = None
        self.cwd = ROOT
        self.command = [
            *(entry or [sys.executable, "-m", "tests.benchmarks.worker", system]),
            "--address",
            address,
            "--task-queue",
            task_queue,
        ]
        for name, value in flags.items():
            if value is not None:
                self.command += [f"--{name.replace('_', '-')}", str(value)]
        self.process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> WorkerProcess:
        self.process = await asyncio.create_subprocess_exec(
            *self.command, cwd=self.cwd, env=self.env, stdout=asyncio.subprocess.PIPE
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout=120)
        if line.strip() != b"ready":
            await self.stop()
            raise RuntimeError(f"{self.system} worker did not start: {line!r}")
        if self.profile is not None:
            self.profile.mkdir(parents=True, exist_ok=True)
            out = self.profile / f"{self.system}-{self.pid}.txt"
            self.profiler = await asyncio.create_subprocess_exec(
                *("py-spy", "record", "--pid", str(self.pid), "--rate", "250", "--gil"),
                *("--format", "raw", "--output", str(out), "--nonblocking"),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        return self

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    async def stop(self) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is not None and profiler.returncode is None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
            await asyncio.wait_for(profiler.wait(), timeout=60)
        process, self.process = self.process, None
        if process is not None:
            await terminate(process, grace_s=30)


# ----------------------------------------------------------------------------- the two systems


class System:
    """How the runner starts, follows and replays one system's sessions."""

    name: str
    model_activity: str

    def __init__(
        self, client: Client, task_queue: str, workdir: Path, result_size: int, tool: str
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.workdir = workdir
        self.result_size = result_size
        self.tool = tool

    def session_id(self, label: str) -> str:
        return f"{self.name}-{label}-{uuid.uuid4().hex[:8]}"

    async def start(self, session_id: str, cycles: int, hold: bool = False) -> WorkflowHandle:
        raise NotImplementedError

    async def wait_done(self, handle: WorkflowHandle) -> None:
        """Wait until a held session has finished its turn."""
        raise NotImplementedError

    async def release(self, handle: WorkflowHandle) -> None:
        raise NotImplementedError

    def replayer(self) -> Replayer:
        raise NotImplementedError

    async def run(self, cycles: int, label: str = "run") -> WorkflowHandle:
        handle = await self.start(self.session_id(label), cycles)
        await handle.result()
        return handle


class KeelSystem(System):
    name = "keel"
    model_activity = "keel.model.converse"

    def __init__(self, *args: Any, config: dict[str, Any] | None = None) -> None:
        """``config``: ``SessionConfig`` fields every session gets (``--keel-config``)."""
        super().__init__(*args)
        self._scripts: dict[int, str] = {}
        self.config = dict(config or {})

    def model(self, cycles: int) -> str:
        """``scripted:`` spec of a script of ``cycles`` tool cycles then a final answer."""
        if cycles not in self._scripts:
            use = {"name": self.tool, "input": {"size": self.result_size}}
            responses: list[dict[str, Any]] = [
                {
                    "content": [{"toolUse": {"toolUseId": f"c{i}", **use}}],
                    "stopReason": "tool_use",
                    "usage": {"inputTokens": 10, "outputTokens": 10},
                }
                for i in range(cycles)
            ]
            responses.append(
                {
                    "content": [{"text": "done"}],
                    "stopReason": "end_turn",
                    "usage": {"inputTokens": 10, "outputTokens": 10},
                }
            )
            self._scripts[cycles] = write_script(self.workdir / f"script-{cycles}.json", responses)
        return self._scripts[cycles]

    async def start(self, session_id: str, cycles: int, hold: bool = False) -> WorkflowHandle:
        from keel.workflows.contracts import CloseInput, SessionConfig
        from keel.workflows.ledger import SessionInput
        from keel.workflows.messages import text_block

        start = SessionInput(
            config=SessionConfig(
                model=self.model(cycles),
                tool_modules=[SAMPLE_TOOLS],
                max_cycles_per_turn=None,
                **self.config,
            ),
            prompt=[text_block("loop")],
        )
        if hold:
            return await self.client.start_workflow(
                "AgentSession", start, id=session_id, task_queue=self.task_queue
            )
        # Signal-with-start: the session runs its first turn, then closes (and completes).
        return await self.client.start_workflow(
            "AgentSession",
            start,
            id=session_id,
            task_queue=self.task_queue,
            start_signal="close",
            start_signal_args=[CloseInput(reason="benchmark")],
        )

    async def wait_done(self, handle: WorkflowHandle) -> None:
        from keel.workflows.contracts import TurnRecord

        delay = 0.05
        while True:
            record = await handle.query("turn", 1, result_type=TurnRecord)
            if record.status in ("completed", "failed", "cancelled"):
                assert record.status == "completed", record.error
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def release(self, handle: WorkflowHandle) -> None:
        from keel.workflows.contracts import CloseInput

        await handle.signal("close", CloseInput(reason="benchmark"))

    def replayer(self) -> Replayer:
        return keel_replayer()


class FloorSystem(System):
    name = "floor"
    model_activity = FLOOR_MODEL
    workflow = FLOOR_WORKFLOW

    async def start(self, session_id: str, cycles: int, hold: bool = False) -> WorkflowHandle:
        return await self.client.start_workflow(
            self.workflow,
            {"cycles": cycles, "result_size": self.result_size, "hold": hold},
            id=session_id,
            task_queue=self.task_queue,
        )

    async def wait_done(self, handle: WorkflowHandle) -> None:
        delay = 0.05
        while not await handle.query("done"):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def release(self, handle: WorkflowHandle) -> None:
        await handle.signal("release")

    def replayer(self) -> Replayer:
        return Replayer(workflows=[FloorLoop])


class PeerSystem(FloorSystem):
    """The peer's workflow takes the floor's input, has its ``done`` query and ``release``.

    Its code lives in the peer's venv only, so this process cannot replay it.
    """

    def __init__(self, peer: Peer, *args: Any) -> None:
        super().__init__(*args)
        self.name = peer.name
        self.model_activity = peer.model_activity
        self.workflow = peer.workflow

    def replayer(self) -> Replayer:
        raise NotImplementedError(f"{self.name}'s workflow runs in its own venv only")


# ----------------------------------------------------------------------------- history


def history_bytes(runs: list[History]) -> int:
    return sum(e.ByteSize() for h in runs for e in h.events)


def model_call_times(runs: list[History], activity_type: str) -> list[float]:
    """Server times (s) at which the model activity was scheduled, in order."""
    times = []
    for history in runs:
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == activity_type:
                    times.append(event.event_time.seconds + event.event_time.nanos / 1e9)
    return times


# ----------------------------------------------------------------------------- the benchmark


class Bench:
    def __init__(
        self,
        options: Options,
        report: Report,
        address: str,
        workdir: Path,
        keel_client: Client,
        floor_client: Client,
        server_pid: int | None = None,
        peer: tuple[Peer, Path] | None = None,
        db_path: Path | None = None,
    ) -> None:
        """``peer``: the peer and its venv's python, if the run has one; ``db_path``: the
        server's SQLite file, when the runner started it on one."""
        self.options = options
        self.server_pid = server_pid
        self.db_path = db_path
        self.report = report
        self.address = address
        self.workdir = workdir
        self.clients = {"keel": keel_client, "floor": floor_client}
        self.store = workdir / "store"
        self.peer, self.peer_python = peer if peer else (None, None)
        # Latency, history and memory measure the peer too; throughput and replay do not.
        self.names = SYSTEMS if self.peer is None else (*SYSTEMS, self.peer.name)

    def system(self, name: str, task_queue: str) -> System:
        o = self.options
        args = (task_queue, self.workdir, o.result_size, o.tool)
        if self.peer is not None and name == self.peer.name:
            return PeerSystem(self.peer, self.clients["floor"], *args)
        if name == "keel":
            return KeelSystem(self.clients[name], *args, config=pairs(o.keel_config))
        return FloorSystem(self.clients[name], *args)

    def add(self, name: str, unit: str, values: dict[str, float | None]) -> None:
        """Report one figure of each system in ``values`` (by system name)."""
        peer = values.get(self.peer.name) if self.peer is not None else None
        self.report.add(name, unit, values.get("keel"), values.get("floor"), peer)

    def worker_env(self) -> dict[str, str]:
        """The workers' environment: with a bytecode cache unless ``--no-bytecode``.

        With ``PYTHONDONTWRITEBYTECODE`` set and no cached bytecode, the workflow sandbox
        compiles every non-passthrough workflow module from source for each new workflow
        run; a deployed worker has its bytecode, so by default the workers get a private
        ``PYTHONPYCACHEPREFIX`` under the run's temporary directory.
        """
        env = dict(os.environ)
        if self.options.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(self.workdir / "pycache")
        return env

    def worker(self, name: str, queue: str, **flags: Any) -> WorkerProcess:
        """The worker process of one system (not started)."""
        freeze = "yes" if self.options.freeze_heap in (name, "both") else "no"
        env = self.worker_env()
        if name == "keel":
            env.update(item.partition("=")[::2] for item in self.options.keel_env)
        if self.peer is None or name != self.peer.name:
            flags["store"] = self.store
            entry = None
        else:
            # The peer's venv, and this repository for its worker module only.
            env.update(PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
            env.pop("VIRTUAL_ENV", None)
            entry = self.peer.entry(self.peer_python)
        return WorkerProcess(
            name,
            self.address,
            queue,
            env,
            self.options.profile,
            entry,
            freeze_heap=freeze,
            **flags,
        )

    @contextlib.asynccontextmanager
    async def workers(self, **flags: Any) -> Any:
        """A fresh worker process per system, each on its own task queue."""
        procs: dict[str, WorkerProcess] = {}
        systems: dict[str, System] = {}
        try:
            for name in self.names:
                queue = f"bench-{name}-{uuid.uuid4().hex[:8]}"
                procs[name] = self.worker(name, queue, **flags)
                systems[name] = self.system(name, queue)
            await asyncio.gather(*(p.start() for p in procs.values()))
            yield systems, procs
        finally:
            await asyncio.gather(*(p.stop() for p in procs.values()))

    async def run_all(self) -> None:
        o = self.options
        async with self.workers() as (systems, procs):
            await self.warm_up(systems)
            await self.latency(systems, procs)
            if o.cpu_rounds:
                await self.cpu_per_cycle(systems, procs)
            # Throughput before the long histories: the server slows down as it fills.
            for level, sessions in enumerate(o.sessions):
                order = SYSTEMS if level % 2 == 0 else SYSTEMS[::-1]
                await self.throughput(systems, procs, sessions, order)
            await self.replay({name: systems[name] for name in SYSTEMS})
            await self.history(systems)
        if o.memory_sessions:
            await self.memory()
        if o.parked:
            await self.parked()
        if o.cold_resume_cycles:
            await self.cold_resume()

    async def warm_up(self, systems: dict[str, System]) -> None:
        """One short session per system: imports, sandbox and caches are warm afterwards."""
        for system in systems.values():
            await system.run(2, "warmup")

    async def latency(self, systems: dict[str, System], procs: dict[str, WorkerProcess]) -> None:
        o = self.options
        names = self.names
        cycle: dict[str, list[float]] = {s: [] for s in names}
        wall: dict[str, list[float]] = {s: [] for s in names}
        cpu = dict.fromkeys(names, 0.0)
        for repeat in range(o.repeats):
            order = names if repeat % 2 == 0 else names[::-1]
            for name in order:
                system, proc = systems[name], procs[name]
                cpu_before = proc.cpu()
                started = time.monotonic()
                handle = await system.run(o.latency_cycles, "latency")
                wall[name].append((time.monotonic() - started) / o.latency_cycles)
                cpu[name] += proc.cpu() - cpu_before
                times = model_call_times(
                    await run_histories(system.client, handle.id), system.model_activity
                )
                cycle[name].append((times[-1] - times[0]) / o.latency_cycles)
        median = statistics.median
        self.add("cycle_latency", "ms", {s: median(cycle[s]) * 1000 for s in names})
        self.add("turn_wall_per_cycle", "ms", {s: median(wall[s]) * 1000 for s in names})
        cycles = o.repeats * o.latency_cycles
        self.add(
            "worker_cpu_per_cycle[sessions=1]", "ms", {s: cpu[s] / cycles * 1000 for s in names}
        )

    async def cpu_per_cycle(
        self, systems: dict[str, System], procs: dict[str, WorkerProcess]
    ) -> None:
        """``worker_cpu_per_cycle``: interleaved rounds of differenced turns, median and spread.

        Each round runs every system once, in an order that rotates from round to round (and
        reverses every other round), so a drift of the machine or the server over the run
        falls on all systems alike. A system's turn in a round is one session of
        ``--cpu-cycles`` cycles and one of 0 cycles (a model call that answers at once), in
        alternating order; the difference of the worker's CPU time (its CPU-time clock, in
        ns) over the two, divided by the cycles, is the round's figure: a session's fixed
        cost (start, close, the ledger) cancels out. The median over the rounds is reported,
        and a ``#`` line gives each system's spread (lowest, quartiles, highest).
        ``ratio_rounds.*`` is the median of the ratios taken round by round.
        """
        o = self.options
        names = self.names
        per: dict[str, list[float]] = {s: [] for s in names}
        await asyncio.sleep(o.settle_s)  # the timers the latency runs left fire first
        for round_ in range(o.cpu_rounds):
            shift = round_ % len(names)
            order = names[shift:] + names[:shift]
            if round_ % 2:
                order = order[::-1]
            for name in order:
                system, proc = systems[name], procs[name]
                used: dict[int, float] = {}
                for cycles in (0, o.cpu_cycles) if round_ % 2 == 0 else (o.cpu_cycles, 0):
                    before = proc.cpu()
                    await system.run(cycles, f"cpu{cycles}")
                    used[cycles] = proc.cpu() - before
                per[name].append((used[o.cpu_cycles] - used[0]) / o.cpu_cycles * 1000)
        figure = f"worker_cpu_per_cycle[cycles={o.cpu_cycles}]"
        for name in names:
            values = sorted(per[name])
            quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
            self.report.note(
                f"{figure} {name} over {len(values)} rounds, ms: lowest {values[0]:.2f}, "
                f"quartiles {quartiles[0]:.2f} / {quartiles[1]:.2f} / {quartiles[2]:.2f}, "
                f"highest {values[-1]:.2f} (interquartile range "
                f"{(quartiles[2] - quartiles[0]) / quartiles[1] * 100:.0f} % of the median)"
            )
        self.add(figure, "ms", {s: statistics.median(per[s]) for s in names})
        rounds = [k / f for k, f in zip(per["keel"], per["floor"], strict=True) if f > 0]
        if rounds:
            self.report.out(f"ratio_rounds.{figure} {statistics.median(rounds):.3f} x")
        if self.peer is not None:
            peer_rounds = [
                k / p for k, p in zip(per["keel"], per[self.peer.name], strict=True) if p > 0
            ]
            if peer_rounds:
                self.report.out(
                    f"ratio_rounds_{self.peer.name}.{figure} {statistics.median(peer_rounds):.3f} x"
                )

    async def history(self, systems: dict[str, System]) -> None:
        sizes: dict[str, dict[int, int | None]] = {s: {} for s in self.names}
        for cycles in [0, *self.options.history_cycles]:
            for name, system in systems.items():
                handle = await system.start(system.session_id(f"history{cycles}"), cycles)
                try:
                    await handle.result()
                    runs = await run_histories(system.client, handle.id)
                except Exception as err:  # the floor and the peer outgrow Temporal's limits
                    await self.history_failed(system, handle, cycles, err)
                    sizes[name][cycles] = None
                    continue
                sizes[name][cycles] = history_bytes(runs)
                if len(runs) > 1:
                    self.report.note(f"{name} at {cycles} cycles: {len(runs)} runs")

        def fixed(name: str) -> float | None:
            value = sizes[name][0]
            return None if value is None else float(value)

        def per_cycle(name: str, cycles: int) -> float | None:
            total, base = sizes[name][cycles], sizes[name][0]
            if total is None or base is None:
                return None
            return (total - base) / cycles

        self.add("history_bytes_fixed", "bytes", {s: fixed(s) for s in self.names})
        for cycles in self.options.history_cycles:
            self.add(
                f"history_bytes_per_cycle[cycles={cycles}]",
                "bytes",
                {s: per_cycle(s, cycles) for s in self.names},
            )
        longest: dict[str, float | None] = {}
        for name in self.names:
            measured = {n: per_cycle(name, n) for n in self.options.history_cycles}
            base = fixed(name)
            known = {n: p for n, p in measured.items() if p is not None}
            longest[name] = None if base is None else longest_turn(base, known, HISTORY_LIMIT_BYTES)
        if any(v is not None for v in longest.values()):
            self.report.note(
                f"{CYCLES_TO_LIMIT}: cycles N of one turn with fixed + N * p(N) = 50 MiB of "
                "history, p(N) = a + b * N through the two largest cycle counts measured (see "
                "tests.benchmarks.peer.longest_turn); extrapolated. The floor and the peer never "
                "continue as new: Temporal terminates their run there. Keel's turn continues as "
                "new long before, so no run of it comes near; its figure counts all its runs"
            )
            self.add(CYCLES_TO_LIMIT, "cycles", longest)

    async def history_failed(
        self, system: System, handle: WorkflowHandle, cycles: int, err: Exception
    ) -> None:
        """Say how far a turn got before it failed (say, at Temporal's history size limit)."""
        note = f"{system.name} history at {cycles} cycles failed: {err!r}"
        if err.__cause__ is not None:
            note += f", because {err.__cause__!r}"
        with contextlib.suppress(Exception):
            runs = await run_histories(system.client, handle.id)
            calls = len(model_call_times(runs, system.model_activity))
            note += (
                f"; its history holds {calls} model calls (tool cycles + 1) in "
                f"{history_bytes(runs)} bytes"
            )
        self.report.note(note)

    async def throughput(
        self,
        systems: dict[str, System],
        procs: dict[str, WorkerProcess],
        sessions: int,
        order: tuple[str, ...] = SYSTEMS,
    ) -> None:
        """``--throughput-repeats`` runs per system, in ABBA order; the medians are reported."""
        o = self.options
        rate: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        cpu: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        server_cpu: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        runs: list[str] = []
        # Side by side: each repeat runs each system once, close in time, so the ratio of
        # its two runs cancels the server's drift over the whole run.
        paired: list[float] = []
        for repeat in range(o.throughput_repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:
                system, proc = systems[name], procs[name]
                # let the timers of the previous run (10 s activity and task timeouts) fire
                await asyncio.sleep(o.settle_s)
                cpu_before = proc.cpu()
                server_before = cpu_seconds(self.server_pid) if self.server_pid else 0.0
                started = time.monotonic()
                await asyncio.gather(
                    *(system.run(o.throughput_cycles, f"tp{sessions}") for _ in range(sessions))
                )
                elapsed = time.monotonic() - started
                cycles = sessions * o.throughput_cycles
                rate[name].append(cycles / elapsed)
                cpu[name].append((proc.cpu() - cpu_before) / cycles * 1000)
                run = f"{name} {rate[name][-1]:.1f} ({cpu[name][-1]:.2f}"
                if self.server_pid:
                    server = cpu_seconds(self.server_pid) - server_before
                    server_cpu[name].append(server / cycles * 1000)
                    run += f" + {server_cpu[name][-1]:.2f}"
                runs.append(run + ")")
            paired.append(rate["keel"][-1] / rate["floor"][-1])
        self.report.note(
            f"throughput[sessions={sessions}] runs in order, cycles/s (worker"
            + (" + server" if self.server_pid else "")
            + " CPU ms per cycle): "
            + ", ".join(runs)
        )
        self.report.note(
            f"throughput[sessions={sessions}] side by side: Keel ahead in "
            f"{sum(r > 1 for r in paired)} of {len(paired)} "
            + ("pair" if len(paired) == 1 else "pairs")
            + " of consecutive runs"
        )
        self.report.add_ratio(f"throughput_paired[sessions={sessions}]", statistics.mean(paired))
        median = statistics.median
        self.report.add(
            f"throughput[sessions={sessions}]",
            "cycles/s",
            median(rate["keel"]),
            median(rate["floor"]),
        )
        self.report.add(
            f"worker_cpu_per_cycle[sessions={sessions}]",
            "ms",
            median(cpu["keel"]),
            median(cpu["floor"]),
        )
        if self.server_pid:
            self.report.add(
                f"server_cpu_per_cycle[sessions={sessions}]",
                "ms",
                median(server_cpu["keel"]),
                median(server_cpu["floor"]),
            )

    async def replay(self, systems: dict[str, System]) -> None:
        o = self.options
        cold: dict[str, float] = {}
        warm: dict[str, float] = {}
        for name, system in systems.items():
            handle = await system.run(o.replay_cycles, "replay")
            runs = await run_histories(system.client, handle.id)
            if len(runs) > 1:
                self.report.note(f"{name} replay history: first of {len(runs)} runs")
            replayer = system.replayer()
            times = []
            for _ in range(1 + o.replay_repeats):
                started = time.perf_counter()
                await replayer.replay_workflow(runs[0])
                times.append(time.perf_counter() - started)
            cold[name] = times[0]
            warm[name] = statistics.median(times[1:]) if times[1:] else times[0]
        cycles = o.replay_cycles
        self.report.add(f"replay[cycles={cycles}]", "s", warm["keel"], warm["floor"])
        self.report.add(f"replay_cold[cycles={cycles}]", "s", cold["keel"], cold["floor"])

    async def parked(self) -> None:
        """``parked_*``: ``tests.benchmarks.parked`` on this run's server, Keel then the floor."""
        result = await parked_side_by_side(
            self.address,
            self.server_pid,
            self.db_path,
            self.options.parked,
            self.workdir / "parked",
            settle_s=self.options.settle_s,
        )
        for line in result.lines():
            if line.startswith("# "):
                self.report.note(line[2:])  # the run's notes, then each side's RSS readings
        floor = {f.name: f for f in result.floor.figures()}
        for mine in result.keel.figures():
            theirs = floor.get(mine.name)
            self.report.add(mine.name, mine.unit, mine.value, theirs.value if theirs else None)

    async def cold_resume(self) -> None:
        """``cold_resume_*``: ``tests.benchmarks.cold_resume`` on this run's server (Keel only)."""
        o = self.options
        where = self.workdir / "cold-resume"
        where.mkdir(parents=True, exist_ok=True)
        lines = await cold_resume(
            self.clients["keel"],
            o.cold_resume_cycles,
            o.cold_resume_can_events,
            o.cold_resume_repeats,
            where,
        )
        for line in lines:
            if line.startswith("#"):
                self.report.note(line.lstrip("# "))
                continue
            name, value, unit = line.split(" ")
            self.report.add(name, unit, float(value), None)

    async def memory(self) -> None:
        """``memory_per_cached_session``: the slope of worker RSS over sessions held in cache.

        Fresh workers, two warm-up sessions each; then ``--memory-steps`` steps, each adding
        ``--memory-sessions`` sessions per system (every session runs a one-cycle turn and
        stays open in the cache), the systems side by side step by step. The figure is the
        least-squares slope of RSS over the sessions held, through the steps' readings: one
        reading's difference moved 0.96-1.56 x between runs (the allocator takes memory from
        the system in arenas, and the first sessions also warm caches), a slope over several
        hundred sessions does not. A ``#`` line gives each reading.
        """
        o = self.options
        step, steps = o.memory_sessions, max(o.memory_steps, 1)
        readings: dict[str, list[tuple[int, int]]] = {s: [] for s in self.names}
        held: dict[str, list[WorkflowHandle[Any, Any]]] = {s: [] for s in self.names}
        async with self.workers(max_cached_workflows=step * steps + 20) as (systems, procs):
            for name in self.names:
                for _ in range(2):
                    await systems[name].run(1, "memwarm")
            await asyncio.sleep(1)
            for name in self.names:
                readings[name].append((0, procs[name].rss()))
            for _ in range(steps):
                for name in self.names:
                    system = systems[name]
                    handles = await asyncio.gather(
                        *(system.start(system.session_id("mem"), 1, hold=True) for _ in range(step))
                    )
                    await asyncio.gather(*(system.wait_done(h) for h in handles))
                    held[name] += handles
                await asyncio.sleep(1)
                for name in self.names:
                    readings[name].append((len(held[name]), procs[name].rss()))
            for name in self.names:
                await asyncio.gather(*(systems[name].release(h) for h in held[name]))
                await asyncio.gather(*(h.result() for h in held[name]))
        per_session: dict[str, float | None] = {}
        for name in self.names:
            points = readings[name][1:] if steps > 1 else readings[name]
            per_session[name] = slope(points) / 1024
            self.report.note(
                f"memory_per_cached_session {name}: RSS at "
                + ", ".join(f"{n} sessions {rss / 2**20:.1f} MB" for n, rss in readings[name])
            )
        self.add("memory_per_cached_session", "KB", per_session)


def slope(points: list[tuple[int, int]]) -> float:
    """The least-squares slope of ``y`` over ``x`` through ``points`` (two or more)."""
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / spread if spread else 0.0


def pairs(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict; a VALUE that reads as JSON (``10``, ``null``) is that."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def machine() -> str:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, IndexError, ValueError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GB"
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem} RAM, Python {platform.python_version()}, "
        f"temporalio {temporalio.__version__}"
    )


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="keel-bench-") as tmp:
        yield Path(tmp)


async def run(
    options: Options,
    out: Callable[[str], None] = print,
    address: str | None = None,
) -> Report:
    """Run the benchmark and print its lines with ``out``.

    Args:
        options: what to measure.
        out: where each output line goes.
        address: an existing Temporal to use instead of starting a dev server (then
            ``options.persistence`` only labels the output).
    """
    report = Report(out, options.peer)
    peer: tuple[Peer, Path] | None = None
    if options.peer is not None:
        spec = PEERS[options.peer]
        venv = options.peer_venv or default_venv(spec)
        python, what = await asyncio.to_thread(ensure_venv, spec, venv, temporalio.__version__)
        report.note(f"peer: {what}")
        peer = (spec, python)
    with _workdir() as workdir:
        server: DevServer | None = None
        if address is None:
            dynamic = list(options.dynamic_config)
            if not options.stock_server:
                dynamic.insert(0, FAST_DISPATCH)
            server = bench_server(options.persistence, workdir / "server", tuple(dynamic))
            await server.start()
            address = server.address
            report.note(f"server: {describe(server)}")
        else:
            report.note(
                f"server: existing Temporal at {address}, persistence={options.persistence}"
            )
        report.note(f"machine: {machine()}")
        report.note(
            "workers: one process per system, temporalio's default concurrency, bytecode "
            + ("cached (private PYTHONPYCACHEPREFIX)" if options.bytecode else "as the env says")
            + f", startup heap frozen out of the GC: {options.freeze_heap}"
        )
        report.note(
            f"tool result {options.result_size} chars per cycle; Keel: AgentSession, scripted "
            f"model, local store, tool {options.tool!r} from {SAMPLE_TOOLS} "
            f"({'async' if options.tool == 'big_async' else 'sync, in a thread'}); "
            f"floor: {FLOOR_WORKFLOW} (tests.benchmarks.floor, async activities)"
        )
        if options.peer is not None:
            report.note(
                f"peer {options.peer}: {PEERS[options.peer].module} in its venv; measured in "
                "the latency, history and memory figures (not throughput or replay)"
            )
        try:
            keel_client = await Client.connect(address, data_converter=DATA_CONVERTER)
            floor_client = await Client.connect(address)
            server_pid = server.pid if server else None
            db_path = server.db_path if server is not None and not server.in_memory else None
            bench = Bench(
                options,
                report,
                address,
                workdir,
                keel_client,
                floor_client,
                server_pid,
                peer,
                db_path,
            )
            await bench.run_all()
        finally:
            if server is not None:
                await server.stop()
    if options.markdown is not None:
        options.markdown.write_text(report.markdown())
    return report


def parse(argv: list[str] | None = None) -> Options:
    d = Options()
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks",
        description="Keel against a hand-written Temporal loop (the floor), in one run.",
    )
    parser.add_argument("--persistence", choices=PERSISTENCE, default=d.persistence)
    parser.add_argument("--latency-cycles", type=int, default=d.latency_cycles)
    parser.add_argument("--repeats", type=int, default=d.repeats)
    parser.add_argument(
        "--cpu-cycles",
        type=int,
        default=d.cpu_cycles,
        help="cycles of the long turn of the worker CPU figure (differenced against 0)",
    )
    parser.add_argument(
        "--cpu-rounds",
        type=int,
        default=d.cpu_rounds,
        help="interleaved rounds of the worker CPU figure; 0 skips it",
    )
    parser.add_argument("--history-cycles", type=int, nargs="+", default=d.history_cycles)
    parser.add_argument("--sessions", type=int, nargs="*", default=d.sessions)
    parser.add_argument("--throughput-cycles", type=int, default=d.throughput_cycles)
    parser.add_argument(
        "--throughput-repeats",
        type=int,
        default=d.throughput_repeats,
        help="runs per system and level, in ABBA order; medians reported (an even number "
        "balances a drift of the server over the run)",
    )
    parser.add_argument(
        "--settle",
        dest="settle_s",
        type=float,
        default=d.settle_s,
        metavar="SECONDS",
        help="idle time before each throughput run, for the previous run's timers to fire",
    )
    parser.add_argument("--replay-cycles", type=int, default=d.replay_cycles)
    parser.add_argument("--replay-repeats", type=int, default=d.replay_repeats)
    parser.add_argument(
        "--memory-sessions",
        type=int,
        default=d.memory_sessions,
        help="sessions per system added at each step of the memory figure; 0 skips it",
    )
    parser.add_argument(
        "--memory-steps",
        type=int,
        default=d.memory_steps,
        help="steps of the memory figure; its slope is fitted through the readings after them",
    )
    parser.add_argument(
        "--parked",
        type=int,
        default=d.parked,
        metavar="N",
        help="sessions per side of the parked-sessions figures (tests.benchmarks.parked); 0 skips",
    )
    parser.add_argument(
        "--keel-config",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a SessionConfig field every Keel session gets (e.g. heartbeat_timeout_s=10)",
    )
    parser.add_argument(
        "--keel-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable of Keel's worker (e.g. KEEL_STREAM_LISTEN=off)",
    )
    parser.add_argument(
        "--cold-resume-cycles",
        type=int,
        default=d.cold_resume_cycles,
        help="cycles before the approval of the cold-resume figures "
        "(tests.benchmarks.cold_resume); 0 skips them",
    )
    parser.add_argument(
        "--cold-resume-can-events",
        type=int,
        nargs="+",
        default=d.cold_resume_can_events,
        help="the continue-as-new sizes the cold-resume figures are measured at",
    )
    parser.add_argument("--cold-resume-repeats", type=int, default=d.cold_resume_repeats)
    parser.add_argument("--result-size", type=int, default=d.result_size)
    parser.add_argument(
        "--tool",
        choices=TOOLS,
        default=d.tool,
        help="the tool of Keel's cycles: big_async (async, like the floor's tool activity: "
        "runs on the event loop) or big (sync: runs in a thread)",
    )
    parser.add_argument(
        "--freeze-heap",
        choices=("keel", "both", "none"),
        default=d.freeze_heap,
        help="which workers freeze their startup heap out of the GC: keel (as `keel worker` "
        "does; the floor is a bare temporalio worker), both, or none",
    )
    parser.add_argument(
        "--dynamic-config-value",
        dest="dynamic_config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to the dev server, e.g. system.enableActivityEagerExecution=false",
    )
    parser.add_argument(
        "--stock-server",
        action="store_true",
        help=f"leave out {FAST_DISPATCH} (then every round trip waits for a ~50 ms poll)",
    )
    parser.add_argument(
        "--no-bytecode",
        dest="bytecode",
        action="store_false",
        help="run the workers with this environment's bytecode settings as they are",
    )
    parser.add_argument("--markdown", type=Path, help="also write a markdown table there")
    parser.add_argument(
        "--peer",
        choices=sorted(PEERS),
        help="also measure this integration (latency, history, memory), in its own venv",
    )
    parser.add_argument(
        "--peer-venv",
        type=Path,
        metavar="DIR",
        help="the peer's venv, made there on first use (default: ~/.cache/keel-bench/PEER-venv)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample each worker with py-spy (collapsed stacks, SYSTEM-PID.txt in this directory)",
    )
    args = parser.parse_args(argv)
    if args.settle_s < 0:
        parser.error(f"--settle must be 0 or more seconds, not {args.settle_s}")
    return Options(**vars(args))


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _timed(main: Awaitable[Report], out: Callable[[str], None]) -> None:
    started = time.monotonic()
    out(f"# load average at start: {_load()}")
    await main
    out(f"# took {time.monotonic() - started:.0f} s; load average at end: {_load()}")


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)

    def out(line: str) -> None:
        print(line, flush=True)

    asyncio.run(_timed(run(options, out), out))
