"""Cold resume of a long session: approve-to-done for a session the worker has not cached.

Issue 33 asks approve-to-done of a 200-cycle session that is not in the worker's cache to take
at most 1 s, and continue-as-new to be what bounds it. For each continue-as-new size N
(``SessionConfig.continue_as_new_events``; Keel's default is 3,000, 10,000 before issue 33),
R sessions each run a turn of C tool cycles (the scripted model calls ``big_async``, 512
characters a result: the workload of the runner's ``replay[cycles=N]``) and then call the
approval-gated ``guarded_record``, and park on that approval. Then:

1. The ``keel worker`` they ran on (its own process, default settings) gets SIGTERM, and a
   fresh ``keel worker`` process starts; the benchmark waits until Temporal lists the new
   process (its pid in the poller identity) among the workflow and activity pollers of the
   task queue.
2. A one-cycle session parked the same way is approved first, untimed: it pays the new
   process's one-time costs (the first workflow in the sandbox, the first activities,
   connections), which are not what this measures. Its approve-to-done is printed as a ``#``
   line.
3. Each parked session is approved, one at a time, and timed from sending
   ``KeelClient.decide`` to its turn's record reading ``completed`` (the ``turn`` query, every
   50 ms, as ``tests.benchmarks.parked`` does).

Why a restart and not eviction from a small cache (``keel worker --max-cached-workflows``):
a new process has nothing cached for certain, whatever the SDK's cache policy, with no other
sessions needed to push one out; and a worker restarted (a deploy, a crash) while sessions
wait days for a person is the common way a session comes back cold. Step 2 keeps the cost of
the process's own start out of the figure: an evicted session on a long-running worker pays
the same replay without it.

A session continues-as-new at its next safe point once its run holds N events, or once the
server suggests it: a Temporal server on its default dynamic config does at 4,096 events
(``limit.historyCount.suggestContinueAsNew``), so Keel's old default N = 10,000 never applied
there and a run holds at most about 4,100 events. At C = 200 (about 2,400 events) a session at
3,000 or 10,000 stays in its first run; the smaller sizes leave it in a run of a few hundred events
(whatever the remainder of C over the run length is, not N). ``--full-runs`` adds, for each
N, R sessions whose turn is sized (from the events of a 1- and a 3-cycle session) to park in
a run just short of N or 4,096: the longest run, so the slowest cold resume, that size lets a
session wait in; their lines read ``[cycles=K,can_events=N,run=full]``.

Figures, one ``figure value unit`` per line, for each N (``[cycles=C,can_events=N]``):

- ``cold_resume_s``: the median approve-to-done; ``cold_resume_max_s``: the slowest;
- ``cold_resume_replay_s``: the median time of Temporal's ``Replayer`` (Keel's, as the
  runner's ``replay`` figure makes it, after one untimed warm-up) on the history of the run
  each session was parked in, fetched before its approval: the replay part of the above;
- ``cold_resume_history_events``: the events of that run (what a cold worker replays);
- ``cold_resume_runs``: the runs of the session at that point (1 + its continue-as-news).

``#`` lines add the first workflow task after the approval as the server saw it (scheduled to
completed, and started to completed: the worker's fetch and replay of the run), the
decision's answer (``decide`` returns once a worker has replayed the session and accepted
the update), the completed turns and effects done twice (must be all and 0), sticky queue
timeouts (a task sent to the stopped worker first), and a least-squares fit of approve-to-done
on the parked run's events over all sizes, with the run length (so the continue-as-new size)
at which it would reach 1 s.

Usage::

    python3 -m tests.benchmarks.cold_resume [--cycles 200] [--can-events 10000 3000 1000 500]
        [--repeats 5] [--full-runs] [--profile DIR]

``--profile DIR`` records the fresh worker with py-spy (250 Hz, raw collapsed stacks) while
the sessions are approved, into ``DIR/cold-resume-PID.txt``; ``python3 -m
tests.benchmarks.stacks`` summarises it. Uses ``TEMPORAL_ADDRESS`` when set, else a dev
server in memory. CI runs a bounded version (tests/benchmarks_ci/test_cold_resume.py),
untimed. The runner can call ``cold_resume``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import temporalio.api.enums.v1 as enums
import temporalio.api.taskqueue.v1 as taskqueue
import temporalio.api.workflowservice.v1 as wsv1
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from keel import KeelClient, SessionConfig, connect, open_store
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import dev_server, run_histories

logger = logging.getLogger(__name__)

RESULT_SIZE = 512  # characters a cycle, as the runner's replay figure
DEFAULT_CAN_EVENTS = (10_000, 3_000, 1_000, 500)
# The events at which a Temporal server suggests continue-as-new by default (its dynamic
# config limit.historyCount.suggestContinueAsNew, 4 Ki); a session honours the suggestion
# (workflow.info().is_continue_as_new_suggested()), so no run grows past it on such a server,
# whatever continue_as_new_events says.
SUGGESTED_CAN_EVENTS = 4 * 1024
POLL_S = 0.05
TURN_TIMEOUT_S = 600.0
WORKER_START_TIMEOUT_S = 60.0
# sessions parked at once; each runs its cycles on the one worker
PARK_AT_ONCE = 5
_TASK_TYPES = (
    enums.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    enums.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
)


@dataclass
class Parked:
    """A session waiting for its approval, and what its history held then.

    Attributes:
        session: the session id.
        can_events: its ``continue_as_new_events``.
        turn_id: the turn that waits.
        interrupt: the interrupt to approve.
        effects: the file ``guarded_record`` appends to.
        run_id: the run it waited in.
        history: that run's history when it waited.
        runs: the session's runs then.
    """

    session: str
    can_events: int
    turn_id: int
    interrupt: str
    effects: Path
    run_id: str = ""
    history: WorkflowHistory | None = None
    runs: int = 0

    @property
    def events(self) -> int:
        """Events of the run it waited in."""
        return len(self.history.events) if self.history else 0


@dataclass
class Resumed:
    """What one approval of a cold session measured.

    Attributes:
        done_s: from sending the decision to the turn reading completed.
        ack_s: from sending the decision to its answer.
        status: the turn's final status.
        effects: the lines ``guarded_record`` wrote (one expected).
        first_task_s: the first workflow task after the approval, scheduled to completed
            (server clock); None when the history did not show it.
        first_task_run_s: the same task, started to completed.
        sticky_timeouts: workflow tasks that timed out waiting to start (sticky queue of the
            stopped worker) after the approval.
    """

    done_s: float
    ack_s: float
    status: str
    effects: list[str]
    first_task_s: float | None = None
    first_task_run_s: float | None = None
    sticky_timeouts: int = 0


@dataclass
class SizeFigures:
    """The figures of one continue-as-new size.

    Attributes:
        cycles: tool cycles of each session's turn.
        can_events: the sessions' ``continue_as_new_events``.
        parked: the sessions, as they waited.
        resumed: their approvals, in the same order.
        replay_s: ``Replayer`` seconds on each parked run's history.
        full: the turn was sized to park in a run just short of ``can_events`` or of
            ``SUGGESTED_CAN_EVENTS`` (the longest run a session of this size can wait in:
            the worst case).
    """

    cycles: int
    can_events: int
    full: bool = False
    parked: list[Parked] = field(default_factory=list)
    resumed: list[Resumed] = field(default_factory=list)
    replay_s: list[float] = field(default_factory=list)

    @property
    def completed(self) -> int:
        """Approved turns that completed."""
        return sum(r.status == "completed" for r in self.resumed)

    @property
    def doubled(self) -> int:
        """Sessions whose approved effect did not happen exactly once."""
        return sum(r.effects != ["approved"] for r in self.resumed)

    def lines(self) -> list[str]:
        """``figure value unit`` lines, then ``#`` notes."""
        full = ",run=full" if self.full else ""
        tag = f"[cycles={self.cycles},can_events={self.can_events}{full}]"
        done = [r.done_s for r in self.resumed] or [0.0]
        events = [p.events for p in self.parked] or [0]
        runs = [p.runs for p in self.parked] or [0]
        lines = [
            f"cold_resume_s{tag} {statistics.median(done):.3f} s",
            f"cold_resume_max_s{tag} {max(done):.3f} s",
            f"cold_resume_replay_s{tag} {_median(self.replay_s):.3f} s",
            f"cold_resume_history_events{tag} {statistics.median(events):.0f} events",
            f"cold_resume_runs{tag} {statistics.median(runs):.0f} runs",
        ]
        first = [r.first_task_s for r in self.resumed if r.first_task_s is not None]
        first_run = [r.first_task_run_s for r in self.resumed if r.first_task_run_s is not None]
        lines.append(
            f"# {tag}: approve-to-done each {_list(done)} s; decision answered (median) "
            f"{_median([r.ack_s for r in self.resumed]):.3f} s; first workflow task after it, "
            f"scheduled to completed {_median(first):.3f} s, started to completed "
            f"{_median(first_run):.3f} s (server clock, median); replay each "
            f"{_list(self.replay_s)} s"
        )
        lines.append(
            f"# {tag}: parked run events {sorted(set(events))}, runs {sorted(set(runs))}; "
            f"completed {self.completed}/{len(self.parked)}, effects done twice or never "
            f"{self.doubled}, sticky-queue timeouts {sum(r.sticky_timeouts for r in self.resumed)}"
        )
        return lines


def fit_note(figures: Sequence[SizeFigures]) -> str | None:
    """A ``#`` line: approve-to-done fitted on the parked run's events, and where it passes 1 s.

    A least-squares line through each size's median; None with fewer than two event counts.
    """
    points = [
        (
            statistics.median(p.events for p in size.parked),
            statistics.median(r.done_s for r in size.resumed),
        )
        for size in figures
        if size.parked and size.resumed
    ]
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
    line = (
        f"# fit of approve-to-done on the parked run's events ({len(points)} sizes): "
        f"{intercept:.3f} s + {slope * 1000:.3f} s per 1,000 events"
    )
    if slope > 0:
        line += (
            f"; 1 s at about {(1 - intercept) / slope:,.0f} events in the run: the largest "
            "continue_as_new_events whose longest run resumes in under 1 s (a run holds up to "
            "about the smaller of continue_as_new_events and Temporal's suggestion, "
            f"{SUGGESTED_CAN_EVENTS:,} events on a default server; extrapolated unless "
            "--full-runs measured it)"
        )
    return line


def full_cycles(can_events: int, fixed: float, per_cycle: float) -> int:
    """The tool cycles that park a session in a first run just short of ``can_events``.

    The session continues-as-new before a cycle (and while parked) once its run holds
    ``can_events`` events, or Temporal suggests it (``SUGGESTED_CAN_EVENTS``, the smaller
    counts): this leaves one cycle's events of room.
    """
    limit = min(can_events, SUGGESTED_CAN_EVENTS)
    return max(1, int((limit - fixed) // per_cycle) - 1)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _list(values: Sequence[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values) or "-"


def session_config(workdir: Path, session: str, cycles: int, can_events: int) -> SessionConfig:
    """``cycles`` tool cycles of ``big_async``, then ``guarded_record``, which waits for approval.

    Args:
        workdir: where the script and the effects file go.
        session: the session id, naming both files.
        cycles: the tool cycles before the approval.
        can_events: the session's ``continue_as_new_events``.
    """
    effects = workdir / f"{session}.txt"
    responses = [
        respond(tool_use(f"c{i}", "big_async", size=RESULT_SIZE), stop="tool_use")
        for i in range(cycles)
    ]
    responses.append(
        respond(
            tool_use("g1", "guarded_record", path=str(effects), value="approved"),
            stop="tool_use",
        )
    )
    responses.append(respond(text("done")))
    model = write_script(workdir / f"{session}.json", responses)
    return SessionConfig(
        model=model,
        tool_modules=[SAMPLE_TOOLS],
        max_cycles_per_turn=None,
        continue_as_new_events=can_events,
    )


class WorkerProcess:
    """A ``keel worker --tools tests.sample_tools`` process on one task queue."""

    def __init__(self, client: Client, task_queue: str, store: Path, log: Path) -> None:
        """Describe the worker; ``start`` runs it.

        Args:
            client: a client of the Temporal the worker is to use.
            task_queue: its task queue.
            store: its conversation store directory.
            log: the file its stderr is appended to.
        """
        self.client = client
        self.task_queue = task_queue
        self.log = log
        self.env = keel_env(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            TEMPORAL_NAMESPACE=client.namespace,
            KEEL_TASK_QUEUE=task_queue,
            KEEL_STORE=str(store),
            KEEL_STREAM_LISTEN="off",
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self.proc is not None, "the worker is not running"
        return self.proc.pid

    async def start(self) -> float:
        """Start the process; return once Temporal lists it as a poller (the seconds it took)."""
        started = time.monotonic()
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
                env=self.env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        identity = f"{self.proc.pid}@"
        while not all([await self._polls(identity, kind) for kind in _TASK_TYPES]):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"keel worker exited with {self.proc.returncode}; see {self.log}"
                )
            if time.monotonic() - started > WORKER_START_TIMEOUT_S:
                raise TimeoutError(f"keel worker {self.proc.pid} did not poll; see {self.log}")
            await asyncio.sleep(0.1)
        return time.monotonic() - started

    async def stop(self) -> None:
        """SIGTERM, and wait for the process to exit."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self.proc.wait, 60)
        self.proc = None

    async def _polls(self, identity: str, kind: enums.TaskQueueType.ValueType) -> bool:
        request = wsv1.DescribeTaskQueueRequest(
            namespace=self.client.namespace,
            task_queue=taskqueue.TaskQueue(
                name=self.task_queue, kind=enums.TaskQueueKind.TASK_QUEUE_KIND_NORMAL
            ),
            task_queue_type=kind,
        )
        response = await self.client.workflow_service.describe_task_queue(request)
        return any(p.identity.startswith(identity) for p in response.pollers)


@asynccontextmanager
async def py_spy(pid: int, out: Path | None) -> AsyncIterator[None]:
    """Record ``pid`` with py-spy into ``out`` for the block (nothing when ``out`` is None)."""
    if out is None:
        yield
        return
    spy = shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw"]
        + ["--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        await asyncio.to_thread(proc.wait, 60)
        logger.info("py-spy profile of worker %s: %s", pid, out)


async def settled_run(client: Client, session: str) -> str:
    """The run id of a session once no workflow task is pending and the run stays the same.

    A session parked on an approval may continue-as-new right after (``continue_as_new_events``
    reached): this waits for the run it stays in.
    """
    last = ""
    while True:
        info = (await client.get_workflow_handle(session).describe()).raw_description
        run = info.workflow_execution_info.execution.run_id
        if run == last and not info.HasField("pending_workflow_task"):
            return run
        last = run
        await asyncio.sleep(0.2)


async def park(
    keel: KeelClient, workdir: Path, session: str, cycles: int, can_events: int
) -> Parked:
    """Run a session's turn up to its approval; record the run it then waits in."""
    config = session_config(workdir, session, cycles, can_events)
    ack = await keel.prompt(session, "go", config=config)
    record = await keel.wait_turn(session, ack.turn_id, timeout_s=TURN_TIMEOUT_S)
    assert record.interrupts, f"{session} ended without waiting: {record.status} {record.error}"
    parked = Parked(
        session, can_events, ack.turn_id, record.interrupts[0].id, workdir / f"{session}.txt"
    )
    parked.run_id = await settled_run(keel.client, session)
    runs = await run_histories(keel.client, session)
    assert runs[-1].run_id == parked.run_id, (runs[-1].run_id, parked.run_id)
    parked.history, parked.runs = runs[-1], len(runs)
    return parked


async def approve(keel: KeelClient, parked: Parked) -> Resumed:
    """Approve a parked session and time it to its turn's end."""
    sent = time.monotonic()
    ack = await keel.decide(parked.session, parked.interrupt, "approve")
    acked = time.monotonic() - sent
    assert ack.turn_id == parked.turn_id, (ack, parked)
    deadline = sent + TURN_TIMEOUT_S
    while True:
        record = await keel.turn(parked.session, parked.turn_id)
        if record.status in ("completed", "failed", "cancelled") or time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_S)
    done = time.monotonic() - sent
    effects = parked.effects.read_text().splitlines() if parked.effects.exists() else []
    resumed = Resumed(done_s=done, ack_s=acked, status=record.status, effects=effects)
    await _first_task(keel.client, parked, resumed)
    return resumed


async def _first_task(client: Client, parked: Parked, resumed: Resumed) -> None:
    """Fill in the first workflow task after the approval, from the run's history."""
    history = await client.get_workflow_handle(parked.session, run_id=parked.run_id).fetch_history()
    after = history.events[parked.events :]
    scheduled: HistoryEvent | None = None
    started: HistoryEvent | None = None
    for event in after:
        if event.HasField("workflow_task_timed_out_event_attributes"):
            resumed.sticky_timeouts += 1
        elif event.HasField("workflow_task_scheduled_event_attributes") and scheduled is None:
            scheduled = event
        elif event.HasField("workflow_task_started_event_attributes"):
            started = event
        elif event.HasField("workflow_task_completed_event_attributes") and started is not None:
            end = event.event_time.ToDatetime()
            if scheduled is not None:
                resumed.first_task_s = (end - scheduled.event_time.ToDatetime()).total_seconds()
            resumed.first_task_run_s = (end - started.event_time.ToDatetime()).total_seconds()
            return


def keel_replayer() -> Replayer:
    """Keel's replayer: ``AgentSession`` in Keel's sandbox, with Keel's data converter."""
    from keel.worker.payloads import DATA_CONVERTER
    from keel.worker.process.sandbox import sandbox_runner
    from keel.workflows.session import AgentSession

    return Replayer(
        workflows=[AgentSession], data_converter=DATA_CONVERTER, workflow_runner=sandbox_runner()
    )


async def run_cold_resume(
    client: Client,
    cycles: int,
    can_events: Sequence[int],
    repeats: int,
    workdir: Path,
    profile: Path | None = None,
    full_runs: bool = False,
) -> tuple[list[SizeFigures], list[str]]:
    """Park, restart the worker, approve each session cold; the figures by size, and notes.

    Args:
        client: a client of the Temporal to use.
        cycles: tool cycles of each session's turn before its approval.
        can_events: the continue-as-new sizes, one group of sessions each.
        repeats: sessions per size.
        workdir: scripts, effects, the conversation store and the workers' logs.
        profile: a directory for a py-spy profile of the fresh worker, or None.
        full_runs: also, for each size, sessions whose turn parks them in a run just short
            of it (``full_cycles``, from the events of a 1- and a 3-cycle session): the
            longest run, so the slowest cold resume, that size allows.
    """
    queue = f"cold-resume-{uuid.uuid4().hex[:8]}"
    store = workdir / "store"
    keel = KeelClient(client, queue, open_store(str(store)))
    worker = WorkerProcess(client, queue, store, workdir / "worker.log")
    figures = [SizeFigures(cycles, n) for n in can_events]
    gate = asyncio.Semaphore(PARK_AT_ONCE)
    notes: list[str] = []

    async def park_one(turn_cycles: int, size: int) -> Parked:
        async with gate:
            name = f"cold-{uuid.uuid4().hex[:10]}"
            return await park(keel, workdir, name, turn_cycles, size)

    try:
        await worker.start()
        started = time.monotonic()
        warm_ups = [await park_one(1, DEFAULT_CAN_EVENTS[0])]  # approved first, untimed
        if full_runs:
            warm_ups.append(await park_one(3, DEFAULT_CAN_EVENTS[0]))
            per_cycle = (warm_ups[1].events - warm_ups[0].events) / 2
            fixed = warm_ups[0].events - per_cycle
            figures += [
                SizeFigures(full_cycles(n, fixed, per_cycle), n, full=True) for n in can_events
            ]
            notes.append(
                f"# full runs: {per_cycle:g} events a cycle, {fixed:g} more a turn (a 1- and a "
                f"3-cycle session): cycles {[s.cycles for s in figures if s.full]}"
            )
        for size in figures:
            size.parked = list(
                await asyncio.gather(
                    *(park_one(size.cycles, size.can_events) for _ in range(repeats))
                )
            )
            logger.info("parked %s sessions at can_events=%s", repeats, size.can_events)
        parked_s = time.monotonic() - started
        old = worker.pid
        await worker.stop()
        ready_s = await worker.start()
        notes.append(
            f"# parked {len(warm_ups) + repeats * len(figures)} sessions in {parked_s:.1f} s on "
            f"keel worker {old}; SIGTERM, fresh keel worker {worker.pid} polling after "
            f"{ready_s:.2f} s"
        )
        first = [await approve(keel, parked) for parked in warm_ups]
        assert all(r.status == "completed" for r in first), first
        notes.append(
            f"# first approval after the restart (1-cycle session, untimed warm-up of the new "
            f"process): {first[0].done_s:.3f} s"
        )
        out = profile / f"cold-resume-{worker.pid}.txt" if profile else None
        async with py_spy(worker.pid, out):
            for size in figures:
                for parked in size.parked:
                    size.resumed.append(await approve(keel, parked))
                logger.info("approved %s sessions at can_events=%s", repeats, size.can_events)
        if out is not None:
            notes.append(f"# py-spy profile of worker {worker.pid} while approving: {out}")
    finally:
        await worker.stop()
    replayer = keel_replayer()
    histories = [p.history for size in figures for p in size.parked if p.history]
    if histories:
        await replayer.replay_workflow(histories[0])  # warm-up, untimed
    for size in figures:
        for parked in size.parked:
            assert parked.history is not None
            started = time.perf_counter()
            await replayer.replay_workflow(parked.history)
            size.replay_s.append(time.perf_counter() - started)
    return figures, notes


async def cold_resume(
    client: Client, cycles: int, can_events: Sequence[int], repeats: int, workdir: Path
) -> list[str]:
    """The benchmark's output lines: figures for each continue-as-new size, then notes.

    Args:
        client: a client of the Temporal to use (the runner's dev server, say).
        cycles: tool cycles of each session's turn before its approval (issue 33: 200).
        can_events: the continue-as-new sizes (``SessionConfig.continue_as_new_events``).
        repeats: sessions per size.
        workdir: an empty directory for scripts, effects, the store and the workers' logs.
    """
    figures, notes = await run_cold_resume(client, cycles, can_events, repeats, workdir)
    return output(figures, notes)


def output(figures: Sequence[SizeFigures], notes: Sequence[str]) -> list[str]:
    """Every size's figure lines, then every size's notes, then ``notes``."""
    lines = [line for size in figures for line in size.lines()]
    fit = fit_note(figures)
    return (
        sorted(lines, key=lambda line: line.startswith("#")) + list(notes) + ([fit] if fit else [])
    )


async def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its lines."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--can-events", type=int, nargs="+", default=list(DEFAULT_CAN_EVENTS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument(
        "--full-runs",
        action="store_true",
        help="also sessions parked in a run just short of each size: its worst case",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="keel-cold-resume-") as tmp:
        options = (args.cycles, args.can_events, args.repeats, Path(tmp), args.profile)
        full = args.full_runs
        address = os.environ.get("TEMPORAL_ADDRESS")
        if address:
            client = await connect(address, os.environ.get("TEMPORAL_NAMESPACE", "default"))
            figures, notes = await run_cold_resume(client, *options, full_runs=full)
        else:
            async with dev_server() as env:
                figures, notes = await run_cold_resume(env.client, *options, full_runs=full)
    print("\n".join(output(figures, notes)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
