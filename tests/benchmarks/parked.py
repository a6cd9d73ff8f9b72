"""Parked sessions: N sessions run one tool cycle and wait for a person, on Keel and the floor.

The workload users run most: long jobs that wait hours or days for an approval. Two sides run
it, one after the other, on the same Temporal (Keel first unless ``--order floor,keel``):

- **keel**: one ``keel worker`` (its own process, default cache size); N sessions started 50
  at a time whose scripted model calls ``record`` (a side effect counted in a file of the
  session's own) and then the approval-gated ``guarded_record``; parked once ``wait_turn``
  sees the interrupt. Each is then approved (``decide``, 50 at a time) and its ``turn`` query
  polled every 50 ms until the turn ends.
- **floor**: the raw floor, ``FloorParked`` (``tests.benchmarks.floor``: a hand-written
  workflow, plain dicts, the default data converter) on a ``tests.benchmarks.worker floor``
  process (its own, default cache size): one recording activity, then a wait for the
  ``approve`` update, then a second recording activity. Parked once its ``parked`` query says
  so (polled as ``wait_turn`` polls); approved with the ``approve`` update (it answers once the
  decision is in), then its ``done`` query polled every 50 ms: the same measure as Keel's. Its
  model activity (``floor.model``, full message list) is called where Keel's scripted model
  is: three times per session.

Between the sides the run pauses ``--settle-s`` (11 s), so the activity timeout timers one side
leaves on the server fire before the other side is measured. Figures, one ``figure value unit``
per line, each as ``keel.<figure>``, ``floor.<figure>`` and ``ratio.<figure>`` (keel / floor,
``nan`` where the floor's figure is 0; no ratio for the counts and the absolute DB sizes):

- ``parked_sessions``, ``parked_park_s`` (all started and waiting), ``parked_sessions_per_s``;
- ``parked_worker_rss_mb_before`` and ``parked_worker_rss_mb`` (while all wait),
  ``parked_rss_kb_per_session``;
- ``parked_alone_approve_to_done_p50_s`` / ``_p99_s``: the first sessions parked (``--alone``,
  default a quarter, at most 100; evicted first from the worker's cache, so they replay)
  approved one at a time: a session's own latency, from sending the decision to the turn's end;
- ``parked_approve_to_done_p50_s`` / ``_p99_s``: the rest, approved 50 at a time (so each
  also waits its place among the 50), and ``parked_approvals_per_s``;
- ``parked_server_cpu_park_ms_per_session`` and ``parked_server_cpu_approve_ms_per_session``:
  the dev server's CPU (user + system, from /proc) while the side parks and while it is
  approved, per session;
- with ``--persistence sqlite``: ``parked_server_db_mb_parked`` and ``parked_server_db_mb_end``
  (the SQLite file plus its ``-wal`` if any, after the side parked and after its approvals; the
  second side's include the first's) and ``parked_server_db_kb_per_session`` (what the side
  added, per session);
- ``parked_lost`` (turns not completed) and ``parked_doubled`` (a tool whose effect happened
  twice, or did not happen): both must be 0, on both sides.

Lines starting with ``#`` say what ran, and which figures are unknown (the server's CPU and DB
when ``TEMPORAL_ADDRESS`` names a Temporal this run did not start; its DB when in memory).

Usage::

    python3 -m tests.benchmarks.parked --sessions 1000
    python3 -m tests.benchmarks.parked --sessions 1000 --persistence sqlite --order floor,keel

Uses ``TEMPORAL_ADDRESS`` when set, else a dev server of its own (stock settings), in memory
or on a SQLite file. The benchmark runner calls :func:`parked_side_by_side` with its own
server. CI runs a bounded version (tests/benchmarks_ci/test_parked.py), untimed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from keel import KeelClient, SessionConfig, connect, open_store
from tests.benchmarks.cold_resume import WorkerProcess as KeelWorker
from tests.benchmarks.floor import PARKED_WORKFLOW, TIMEOUT, FloorParked
from tests.benchmarks.process_stats import cpu_seconds, rss_bytes
from tests.benchmarks.server import PERSISTENCE, bench_server, describe
from tests.helpers.scripts import respond, text, tool_use, write_script

logger = logging.getLogger(__name__)
# The floor waits for its session to park by polling a query, 50 ms backing off to 0.5 s.
POLL_START_S = 0.05
POLL_MAX_S = 0.5

TOOLS = "tests.sample_tools"
AT_ONCE = 50
SIDES = ("keel", "floor")
# Long enough for the activity timeout timers of one side (10 s: the floor's TIMEOUT, and the
# delay of Keel's own activity timers) to fire before the other side is measured.
SETTLE_S = TIMEOUT.total_seconds() + 1.0
PARK_TIMEOUT_S = 600.0
DONE_POLL_S = 0.05
DONE_POLLS = 6000
EFFECTS = ["cycle", "approved"]


class Figure(NamedTuple):
    """One measured figure of one side."""

    name: str
    value: float
    unit: str
    digits: int
    ratio: bool = True


@dataclass
class ParkedFigures:
    """What one side's parked-sessions run measured.

    Attributes:
        sessions: how many sessions ran.
        park_s: from the first start to the last session parked.
        rss_before_mb: the worker's RSS before the sessions.
        rss_parked_mb: the worker's RSS while all sessions wait.
        approve_to_done_s: per session, from sending the approval to its turn's end.
        approve_wall_s: from the first approval sent to the last turn done.
        lost: turns that did not complete.
        doubled: sessions whose effects are not exactly one ``cycle`` and one ``approved``.
        server_cpu_park_s: the server's CPU while parking; None when unknown.
        server_cpu_approve_s: the server's CPU while approving; None when unknown.
        db_mb_start: the server's DB (file and WAL) before the side; None when unknown.
        db_mb_parked: the same, once all parked.
        db_mb_end: the same, once all turns are done.
        alone_s: approve-to-done of the first sessions parked, approved one at a time.
        rss_steps: (sessions parked, worker RSS in MB) at each tenth of the parking.
    """

    sessions: int
    park_s: float = 0.0
    rss_before_mb: float = 0.0
    rss_parked_mb: float = 0.0
    approve_to_done_s: list[float] = field(default_factory=list)
    approve_wall_s: float = 0.0
    lost: int = 0
    doubled: int = 0
    server_cpu_park_s: float | None = None
    server_cpu_approve_s: float | None = None
    db_mb_start: float | None = None
    db_mb_parked: float | None = None
    db_mb_end: float | None = None
    alone_s: list[float] = field(default_factory=list)
    rss_steps: list[tuple[int, float]] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """Every figure known, in the order they are printed."""
        done = sorted(self.approve_to_done_s) or [0.0]
        p99 = percentile(done, 0.99)
        per = max(self.sessions, 1)
        grown_kb = (self.rss_parked_mb - self.rss_before_mb) * 1024 / per
        figures = [
            Figure("parked_sessions", self.sessions, "sessions", 0, ratio=False),
            Figure("parked_park_s", self.park_s, "s", 1),
            Figure(
                "parked_sessions_per_s", self.sessions / max(self.park_s, 1e-9), "sessions/s", 1
            ),
            Figure("parked_worker_rss_mb_before", self.rss_before_mb, "MB", 1),
            Figure("parked_worker_rss_mb", self.rss_parked_mb, "MB", 1),
            Figure("parked_rss_kb_per_session", grown_kb, "KB", 1),
            Figure("parked_approve_to_done_p50_s", statistics.median(done), "s", 2),
            Figure("parked_approve_to_done_p99_s", p99, "s", 2),
            Figure(
                "parked_approvals_per_s",
                len(self.approve_to_done_s) / max(self.approve_wall_s, 1e-9),
                "/s",
                1,
            ),
        ]
        if self.alone_s:
            alone = sorted(self.alone_s)
            figures += [
                Figure("parked_alone_approve_to_done_p50_s", statistics.median(alone), "s", 3),
                Figure("parked_alone_approve_to_done_p99_s", percentile(alone, 0.99), "s", 3),
            ]
        if self.server_cpu_park_s is not None and self.server_cpu_approve_s is not None:
            figures += [
                Figure(
                    "parked_server_cpu_park_ms_per_session",
                    self.server_cpu_park_s * 1000 / per,
                    "ms",
                    2,
                ),
                Figure(
                    "parked_server_cpu_approve_ms_per_session",
                    self.server_cpu_approve_s * 1000 / per,
                    "ms",
                    2,
                ),
            ]
        if (
            self.db_mb_start is not None
            and self.db_mb_parked is not None
            and self.db_mb_end is not None
        ):
            figures += [
                Figure("parked_server_db_mb_parked", self.db_mb_parked, "MB", 2, ratio=False),
                Figure("parked_server_db_mb_end", self.db_mb_end, "MB", 2, ratio=False),
                Figure(
                    "parked_server_db_kb_per_session",
                    (self.db_mb_end - self.db_mb_start) * 1024 / per,
                    "KB",
                    1,
                ),
            ]
        figures += [
            Figure("parked_lost", self.lost, "turns", 0, ratio=False),
            Figure("parked_doubled", self.doubled, "effects", 0, ratio=False),
        ]
        return figures

    def lines(self) -> list[str]:
        """``figure value unit``, one per figure."""
        return [f"{f.name} {f.value:.{f.digits}f} {f.unit}" for f in self.figures()]


@dataclass
class SideBySide:
    """Both sides' figures, measured on one Temporal, and what the reader must know of the run.

    Attributes:
        keel: Keel's figures.
        floor: the floor's figures.
        notes: what ran and what is unknown, each printed as a ``#`` line.
    """

    keel: ParkedFigures
    floor: ParkedFigures
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The notes, then each figure as ``keel.``, ``floor.`` and ``ratio.`` lines."""
        out = [f"# {note}" for note in self.notes]
        for side in (self.keel, self.floor):
            if side.rss_steps:
                name = "keel" if side is self.keel else "floor"
                out.append(
                    f"# {name} worker RSS while parking: "
                    + ", ".join(f"{n} parked {mb:.0f} MB" for n, mb in side.rss_steps)
                )
        floor = {f.name: f for f in self.floor.figures()}
        for mine in self.keel.figures():
            out.append(f"keel.{mine.name} {mine.value:.{mine.digits}f} {mine.unit}")
            theirs = floor.get(mine.name)
            if theirs is None:
                continue
            out.append(f"floor.{theirs.name} {theirs.value:.{theirs.digits}f} {theirs.unit}")
            if mine.ratio:
                ratio = mine.value / theirs.value if theirs.value else math.nan
                out.append(f"ratio.{mine.name} {ratio:.2f} x")
        return out


def percentile(ordered: Sequence[float], share: float) -> float:
    """The value below which ``share`` of the sorted values lie (nearest rank)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


class Server:
    """What this process can see of the Temporal both sides run on: its CPU and its DB."""

    def __init__(self, pid: int | None, db_path: Path | None) -> None:
        """The server process ``pid`` (None: unknown) with its SQLite file ``db_path``.

        Args:
            pid: the dev server's process id, or None when it is not known (not ours).
            db_path: its SQLite file, or None (in memory, or not known).
        """
        self.pid = pid
        self.db_path = db_path

    def cpu_s(self) -> float | None:
        """The server's CPU time so far, in seconds; None when unknown."""
        if self.pid is None:
            return None
        return cpu_seconds(self.pid)

    def db_mb(self) -> float | None:
        """The SQLite file plus its ``-wal``, in MB; None when unknown."""
        if self.db_path is None:
            return None
        files = (self.db_path, self.db_path.with_name(self.db_path.name + "-wal"))
        return sum(f.stat().st_size for f in files if f.exists()) / 1024 / 1024


def rss_mb(pid: int) -> float:
    """A process's resident set size (VmRSS), in MB."""
    return rss_bytes(pid) / 2**20


def effects_file(workdir: Path, session: str) -> Path:
    """The file a session's tools append their effects to."""
    return workdir / f"{session}.txt"


def config(workdir: Path, session: str) -> SessionConfig:
    """One tool cycle with a counted effect, then a call that waits for approval."""
    effects = effects_file(workdir, session)
    model = write_script(
        workdir / f"{session}.json",
        [
            respond(tool_use("r1", "record", path=str(effects), value="cycle"), stop="tool_use"),
            respond(
                tool_use("g1", "guarded_record", path=str(effects), value="approved"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
    )
    return SessionConfig(model=model, tool_modules=[TOOLS])


async def poll_until_done(done: Callable[[], Awaitable[bool]]) -> bool:
    """Ask ``done`` every 50 ms until it says yes (True) or 300 s passed (False)."""
    for _ in range(DONE_POLLS):
        if await done():
            return True
        await asyncio.sleep(DONE_POLL_S)
    return False


class Side(Protocol):
    """One system running the workload: its worker process, parking and approving a session."""

    name: str
    workdir: Path

    @property
    def pid(self) -> int:
        """The worker process."""
        ...

    async def start(self) -> None:
        """Start the worker process and wait until it can take work."""

    async def stop(self) -> None:
        """Stop the worker process."""

    async def park(self, session: str) -> str:
        """Start a session and wait until it waits for the approval; what approves it."""
        ...

    async def approve(self, session: str, token: str) -> bool:
        """Send the approval, then poll until the turn ends; whether it completed."""
        ...


class KeelSide:
    """Keel: ``keel worker`` (default settings), ``KeelClient`` prompts, decides and polls."""

    name = "keel"

    def __init__(self, address: str, namespace: str, workdir: Path) -> None:
        self.address = address
        self.namespace = namespace
        self.workdir = workdir
        self.queue = f"parked-keel-{uuid.uuid4().hex[:8]}"
        self.store = workdir / "store"
        self.worker: KeelWorker | None = None
        self._keel: KeelClient | None = None

    @property
    def pid(self) -> int:
        assert self.worker is not None
        return self.worker.pid

    @property
    def keel(self) -> KeelClient:
        assert self._keel is not None
        return self._keel

    async def start(self) -> None:
        client = await connect(self.address, self.namespace)
        self.worker = KeelWorker(client, self.queue, self.store, self.workdir / "worker.log")
        await self.worker.start()  # returns once Temporal lists it as a poller
        self._keel = KeelClient(client, self.queue, open_store(str(self.store)))

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop()

    async def park(self, session: str) -> str:
        ack = await self.keel.prompt(session, "go", config=config(self.workdir, session))
        record = await self.keel.wait_turn(session, ack.turn_id, timeout_s=PARK_TIMEOUT_S)
        assert record.interrupts, record
        return record.interrupts[0].id

    async def approve(self, session: str, token: str) -> bool:
        ack = await self.keel.decide(session, token, "approve")
        status = ""

        async def ended() -> bool:
            nonlocal status
            status = (await self.keel.turn(session, ack.turn_id)).status
            return status in ("completed", "failed", "cancelled")

        return await poll_until_done(ended) and status == "completed"


class FloorSide:
    """The raw floor: ``FloorParked`` on a ``tests.benchmarks.worker floor`` process."""

    name = "floor"

    def __init__(self, address: str, namespace: str, workdir: Path) -> None:
        # Imported here: the runner imports this module to print these figures in its run.
        from tests.benchmarks.runner import WorkerProcess

        self.address = address
        self.namespace = namespace
        self.workdir = workdir
        self.queue = f"parked-floor-{uuid.uuid4().hex[:8]}"
        self.worker = WorkerProcess("floor", address, self.queue)
        self._client: Client | None = None

    @property
    def pid(self) -> int:
        return self.worker.pid

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    async def start(self) -> None:
        self._client = await Client.connect(self.address, namespace=self.namespace)
        await self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop()

    async def park(self, session: str) -> str:
        path = str(effects_file(self.workdir, session))
        handle = await self.client.start_workflow(
            PARKED_WORKFLOW, {"path": path}, id=session, task_queue=self.queue
        )
        delay = POLL_START_S
        deadline = time.monotonic() + PARK_TIMEOUT_S
        while True:
            try:
                if await handle.query(FloorParked.parked):
                    return session
            except (WorkflowQueryFailedError, RPCError) as err:
                logger.debug("floor session %s not queryable yet: %s", session, err)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"floor session {session!r} did not park")
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)

    async def approve(self, session: str, token: str) -> bool:
        handle = self.client.get_workflow_handle(token)
        try:
            await handle.execute_update(FloorParked.approve)
        except WorkflowUpdateFailedError:
            logger.exception("floor session %s refused its approval", session)
            return False

        async def ended() -> bool:
            return await handle.query(FloorParked.done)

        return await poll_until_done(ended)


async def run_side(side: Side, sessions: int, server: Server, alone: int = 0) -> ParkedFigures:
    """Run the workload on one side: start its worker, park all, approve all, stop the worker.

    Args:
        side: the system measured.
        sessions: how many sessions.
        server: the Temporal both sides run on (its CPU and DB, when known).
        alone: how many of the first parked are approved one at a time, first.

    Returns:
        The side's figures.
    """
    figures = ParkedFigures(sessions=sessions)
    names = [f"parked-{side.name}-{uuid.uuid4().hex[:10]}" for _ in range(sessions)]
    gate = asyncio.Semaphore(AT_ONCE)
    await side.start()
    try:
        figures.rss_before_mb = rss_mb(side.pid)
        figures.db_mb_start = server.db_mb()
        logger.info("%s: parking %d sessions", side.name, sessions)
        cpu = server.cpu_s()
        started = time.monotonic()

        step = max(sessions // 10, 1)
        parked = 0

        async def park(name: str) -> str:
            nonlocal parked
            async with gate:
                token = await side.park(name)
            parked += 1
            if parked % step == 0:
                figures.rss_steps.append((parked, rss_mb(side.pid)))
            return token

        tokens = await asyncio.gather(*(park(n) for n in names))
        figures.park_s = time.monotonic() - started
        after = server.cpu_s()
        if cpu is not None and after is not None:
            figures.server_cpu_park_s = after - cpu
        await asyncio.sleep(1.0)
        figures.rss_parked_mb = rss_mb(side.pid)
        figures.db_mb_parked = server.db_mb()

        async def approve(name: str, token: str) -> None:
            async with gate:
                sent = time.monotonic()
                completed = await side.approve(name, token)
                figures.approve_to_done_s.append(time.monotonic() - sent)
                if not completed:
                    figures.lost += 1

        # The first parked, evicted first from the worker's cache: one at a time, so the
        # figure is a session's own approve-to-done, not its place in a queue of AT_ONCE.
        logger.info("%s: approving %d sessions one at a time", side.name, alone)
        for name, token in zip(names[:alone], tokens[:alone], strict=True):
            sent = time.monotonic()
            completed = await side.approve(name, token)
            figures.alone_s.append(time.monotonic() - sent)
            if not completed:
                figures.lost += 1
        logger.info("%s: approving %d sessions", side.name, sessions - alone)
        cpu = server.cpu_s()
        started = time.monotonic()
        await asyncio.gather(
            *(approve(n, t) for n, t in zip(names[alone:], tokens[alone:], strict=True))
        )
        figures.approve_wall_s = time.monotonic() - started
        after = server.cpu_s()
        if cpu is not None and after is not None:
            figures.server_cpu_approve_s = after - cpu
        figures.db_mb_end = server.db_mb()
        for name in names:
            effects = effects_file(side.workdir, name)
            if not effects.exists() or effects.read_text().splitlines() != EFFECTS:
                figures.doubled += 1
    finally:
        await side.stop()
    return figures


async def parked_side_by_side(
    address: str,
    server_pid: int | None,
    db_path: Path | None,
    sessions: int,
    workdir: Path,
    *,
    namespace: str = "default",
    order: Sequence[str] = SIDES,
    settle_s: float = SETTLE_S,
    alone: int | None = None,
) -> SideBySide:
    """Run the parked workload on Keel and on the floor, one after the other, on one Temporal.

    Args:
        address: the Temporal both sides use (``host:port``).
        server_pid: the dev server's process, for its CPU; None when unknown.
        db_path: the dev server's SQLite file, for its size; None when in memory or unknown.
        sessions: sessions per side.
        workdir: where the effect files, scripts, Keel's store and the worker log go.
        namespace: the Temporal namespace.
        order: which side runs first: ``("keel", "floor")`` or ``("floor", "keel")``.
        settle_s: the pause before the second side (the first side's timers fire).
        alone: how many of the first parked each side approves one at a time before the
            rest; default a quarter of the sessions, at most 100.

    Returns:
        Both sides' figures with the notes of the run; ``lines()`` prints them.

    Raises:
        ValueError: ``order`` is not both sides once.
    """
    if sorted(order) != sorted(SIDES):
        raise ValueError(f"order must name {SIDES} once each, not {tuple(order)!r}")
    server = Server(server_pid, db_path)
    alone = min(sessions // 4, 100) if alone is None else min(alone, sessions)
    notes = [
        f"parked: {sessions} sessions per side, {AT_ONCE} at a time, {' then '.join(order)} "
        f"on one Temporal at {address} ({settle_s:.0f} s settle between them); keel: "
        "`keel worker` (scripted model, record then guarded_record); floor: "
        f"{PARKED_WORKFLOW} (tests.benchmarks.floor: model, record, model, approve update, "
        "record, model); approve-to-done alone: the first sessions parked (evicted first from "
        "the worker's cache once more than it holds have parked), approved one at a time, "
        f"before the others are approved {AT_ONCE} at a time"
    ]
    if server_pid is None:
        notes.append(
            "server CPU and DB size unknown: no server process given (a Temporal this run did "
            "not start, e.g. TEMPORAL_ADDRESS)"
        )
    elif db_path is None:
        notes.append("server DB size unknown: the server keeps its state in memory")
    results: dict[str, ParkedFigures] = {}
    for index, name in enumerate(order):
        if index:
            await asyncio.sleep(settle_s)
        where = workdir / name
        where.mkdir(parents=True, exist_ok=True)
        side: Side = (
            KeelSide(address, namespace, where)
            if name == "keel"
            else FloorSide(address, namespace, where)
        )
        results[name] = await run_side(side, sessions, server, alone)
    return SideBySide(keel=results["keel"], floor=results["floor"], notes=notes)


async def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000, help="per side")
    parser.add_argument(
        "--persistence",
        choices=PERSISTENCE,
        default="memory",
        help="the dev server's state: in memory, or a SQLite file (for the DB size figures)",
    )
    parser.add_argument(
        "--order",
        choices=[",".join(SIDES), ",".join(reversed(SIDES))],
        default=",".join(SIDES),
        help="which side runs first",
    )
    parser.add_argument("--settle-s", type=float, default=SETTLE_S, help="pause between sides")
    parser.add_argument(
        "--alone",
        type=int,
        help="the first parked sessions approved one at a time (default: a quarter, at most 100)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    order = args.order.split(",")
    with tempfile.TemporaryDirectory(prefix="keel-parked-") as tmp:
        workdir = Path(tmp)
        address = os.environ.get("TEMPORAL_ADDRESS")
        if address:
            namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
            result = await parked_side_by_side(
                address,
                None,
                None,
                args.sessions,
                workdir,
                namespace=namespace,
                order=order,
                settle_s=args.settle_s,
                alone=args.alone,
            )
            result.notes.insert(0, f"server: existing Temporal at {address} (TEMPORAL_ADDRESS)")
        else:
            server = bench_server(args.persistence, workdir / "server", ())
            async with server:
                result = await parked_side_by_side(
                    server.address,
                    server.pid,
                    None if server.in_memory else server.db_path,
                    args.sessions,
                    workdir,
                    order=order,
                    settle_s=args.settle_s,
                    alone=args.alone,
                )
                result.notes.insert(0, f"server: {describe(server)}")
    print("\n".join(result.lines()), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
