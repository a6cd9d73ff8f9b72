"""The heartbeat trade-off: Actions a long model call pays against how soon a crash recovers.

For one ``SessionConfig.heartbeat_timeout_s``, on ``keel worker`` processes (``--tools
tests.sample_tools``, the CLI's worker as users run it):

- ``actions``: one turn of one model call of ``call_s`` seconds, started with
  ``KeelClient.prompt`` and waited for without a client polling (``KeelStatus`` read with
  ``DescribeWorkflowExecution``: no Action); its Actions by type (heartbeats are
  ``grpc_RecordActivityTaskHeartbeat``);
- ``recovery``: another such turn for each way a worker dies (``HANDOVERS``); ``kill_at``
  into the call the worker is killed (SIGKILL); ``recovery_s`` is the time from the kill until
  the call's next attempt started (its ``last_started_time`` with ``attempt`` 2 among the
  workflow's pending activities, read with ``DescribeWorkflowExecution``), ``done_s`` until the
  turn has ended (the second attempt runs the whole call again), and ``worker_start_s`` until
  a worker started after the kill logged that it polls:

  - ``restart``: a new ``keel worker`` is started at once where the dead one ran (same
    state directory): it gives the dead worker's attempt back as it starts
    (``keel.worker.process.inflight``);
  - ``beside``: another worker already runs on the same machine: it finds the dead worker's
    journal within a second;
  - ``elsewhere``: the new worker runs on another machine (another state directory, started
    at once): only the heartbeat timeout tells Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState

from keel import KeelClient, SessionConfig
from tests.benchmarks.action_meter import ActionMeter, Actions
from tests.benchmarks.action_sides import Delays, keel_script, until_settled
from tests.helpers.cli import ROOT
from tests.helpers.scripts import SAMPLE_TOOLS

HEARTBEAT = "grpc_RecordActivityTaskHeartbeat"
ACTIVITY_START = "command_ScheduleActivityTask"
POLL_S = 0.05


HANDOVERS = ("restart", "beside", "elsewhere")


@dataclass
class Recovery:
    """How soon a killed worker's call went on, one way (``HANDOVERS``)."""

    handover: str
    recovery_s: float
    done_s: float
    worker_start_s: float | None


@dataclass
class Tradeoff:
    """One heartbeat timeout's figures."""

    heartbeat_timeout_s: float
    actions: Actions
    recoveries: list[Recovery]


class WorkerProcess:
    """``keel worker`` in its own process; notes when it logged that it polls."""

    def __init__(self, env: dict[str, str]) -> None:
        """Start it now."""
        self.started = time.time()
        self.ready_at: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS]
            + ["--log-level", "info"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if self.ready_at is None and "task queue" in line:
                self.ready_at = time.time()

    def kill(self) -> float:
        """SIGKILL; the time it was sent."""
        sent = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return sent

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _attempt_started(keel: KeelClient, session: str, attempt: int) -> float:
    """When the session's pending activity of this attempt started (epoch seconds)."""
    handle = keel.client.get_workflow_handle(session)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 300
    while loop.time() < deadline:
        described = (await handle.describe()).raw_description
        for pending in described.pending_activities:
            if (
                pending.attempt >= attempt
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            ):
                return pending.last_started_time.ToDatetime().timestamp()
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{session}: no attempt {attempt} started")


async def tradeoff(
    keel: KeelClient,
    meter: ActionMeter,
    env: dict[str, str],
    workdir: Path,
    heartbeat_timeout_s: float,
    call_s: float,
    kill_at: float,
) -> Tradeoff:
    """Both figures of one heartbeat timeout (see the module's docstring)."""
    delays = Delays(model_s=call_s, tool_s=0)
    config = keel_script(workdir, 0, delays, heartbeat_timeout_s=heartbeat_timeout_s)
    first = WorkerProcess(env)
    session = f"act-hb-{uuid.uuid4().hex[:10]}"
    try:
        before = await meter.settled()
        await keel.prompt(session, "go", config=config)
        await until_settled(keel.client, session, ("idle", "waiting"))
        actions = (await meter.settled()).minus(before)
    finally:
        with contextlib.suppress(Exception):
            await keel.client.get_workflow_handle(session).terminate("measured")
        first.stop()
    recoveries = []
    for handover in HANDOVERS:
        recoveries.append(await _recovery(keel, env, workdir, config, kill_at, handover))
    return Tradeoff(heartbeat_timeout_s, actions, recoveries)


async def _recovery(
    keel: KeelClient,
    env: dict[str, str],
    workdir: Path,
    config: SessionConfig,
    kill_at: float,
    handover: str,
) -> Recovery:
    """Kill the worker running a call ``kill_at`` into it; how soon the call went on."""
    session = f"act-kill-{uuid.uuid4().hex[:10]}"
    first = WorkerProcess(env)
    others: list[WorkerProcess] = []
    try:
        await keel.prompt(session, "go", config=config)
        started = await _attempt_started(keel, session, 1)
        if handover == "beside":
            others.append(WorkerProcess(env))
            while others[0].ready_at is None:
                await asyncio.sleep(POLL_S)
        await asyncio.sleep(max(0.0, started + kill_at - time.time()))
        killed = first.kill()
        if handover != "beside":
            elsewhere = {"XDG_STATE_HOME": str(workdir / f"machine-{uuid.uuid4().hex[:6]}")}
            others.append(WorkerProcess(env | elsewhere if handover == "elsewhere" else env))
        recovered = await _attempt_started(keel, session, 2)
        await until_settled(keel.client, session, ("idle", "waiting"))
        done = time.time()
        ready = others[0].ready_at if handover != "beside" else None
        return Recovery(
            handover=handover,
            recovery_s=recovered - killed,
            done_s=done - killed,
            worker_start_s=None if ready is None else ready - others[0].started,
        )
    finally:
        with contextlib.suppress(Exception):
            await keel.client.get_workflow_handle(session).terminate("measured")
        first.stop()
        for other in others:
            other.stop()
