"""Parked sessions: N sessions that each run one tool cycle, then wait for a person.

The workload users run most: long jobs that wait hours or days for an approval. One
``keel worker`` (its own process, default cache size), N sessions started 50 at a time whose
scripted model calls ``record`` (a side effect counted in a file of the session's own) and then
the approval-gated ``guarded_record``; once all wait, each is approved and its turn awaited.
Figures, one ``figure value unit`` per line:

- ``parked_sessions``, ``parked_park_s`` (all started and waiting), ``parked_sessions_per_s``;
- ``parked_worker_rss_mb`` (before the sessions and while all wait), ``parked_rss_kb_per_session``;
- ``parked_approve_to_done_p50_s`` / ``_p99_s`` (from sending the decision to the turn's end:
  a session evicted from the worker's cache replays first), ``parked_approvals_per_s``;
- ``parked_lost`` (turns not completed) and ``parked_doubled`` (a tool whose effect happened
  twice): both must be 0.

Usage::

    python3 -m tests.benchmarks.parked --sessions 1000

Uses ``TEMPORAL_ADDRESS`` when set, else a dev server in memory. CI runs a bounded version
(tests/benchmarks_ci/test_parked.py), untimed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from keel import KeelClient, SessionConfig, connect, open_store
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import respond, text, tool_use, write_script
from tests.helpers.temporal import dev_server

TOOLS = "tests.sample_tools"
AT_ONCE = 50


@dataclass
class ParkedFigures:
    """What a parked-sessions run measured."""

    sessions: int
    park_s: float = 0.0
    rss_before_mb: float = 0.0
    rss_parked_mb: float = 0.0
    approve_to_done_s: list[float] = field(default_factory=list)
    approve_wall_s: float = 0.0
    lost: int = 0
    doubled: int = 0

    def lines(self) -> list[str]:
        done = sorted(self.approve_to_done_s) or [0.0]
        p99 = done[min(len(done) - 1, int(len(done) * 0.99))]
        grown_kb = (self.rss_parked_mb - self.rss_before_mb) * 1024 / max(self.sessions, 1)
        return [
            f"parked_sessions {self.sessions} sessions",
            f"parked_park_s {self.park_s:.1f} s",
            f"parked_sessions_per_s {self.sessions / max(self.park_s, 1e-9):.1f} sessions/s",
            f"parked_worker_rss_mb_before {self.rss_before_mb:.1f} MB",
            f"parked_worker_rss_mb {self.rss_parked_mb:.1f} MB",
            f"parked_rss_kb_per_session {grown_kb:.1f} KB",
            f"parked_approve_to_done_p50_s {statistics.median(done):.2f} s",
            f"parked_approve_to_done_p99_s {p99:.2f} s",
            f"parked_approvals_per_s {self.sessions / max(self.approve_wall_s, 1e-9):.1f} /s",
            f"parked_lost {self.lost} turns",
            f"parked_doubled {self.doubled} effects",
        ]


def rss_mb(pid: int) -> float:
    """A process's resident set size (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def config(workdir: Path, session: str) -> SessionConfig:
    """One tool cycle with a counted effect, then a call that waits for approval."""
    effects = workdir / f"{session}.txt"
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


async def run_parked(client: Client, sessions: int, workdir: Path) -> ParkedFigures:
    """Run the workload against ``client``'s Temporal with a ``keel worker`` of its own."""
    queue = f"parked-{uuid.uuid4().hex[:8]}"
    store = workdir / "store"
    env = keel_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        KEEL_TASK_QUEUE=queue,
        KEEL_STORE=str(store),
        KEEL_STREAM_LISTEN="off",
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", TOOLS],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "worker.log").open("w"),
    )
    keel = KeelClient(client, queue, open_store(str(store)))
    figures = ParkedFigures(sessions=sessions)
    names = [f"parked-{uuid.uuid4().hex[:10]}" for _ in range(sessions)]
    gate = asyncio.Semaphore(AT_ONCE)
    try:
        await asyncio.sleep(2.0)  # the worker starts
        figures.rss_before_mb = rss_mb(worker.pid)
        started = time.monotonic()

        async def park(name: str) -> str:
            async with gate:
                ack = await keel.prompt(name, "go", config=config(workdir, name))
                record = await keel.wait_turn(name, ack.turn_id, timeout_s=600)
                assert record.interrupts, record
                return record.interrupts[0].id

        interrupts = await asyncio.gather(*(park(n) for n in names))
        figures.park_s = time.monotonic() - started
        await asyncio.sleep(1.0)
        figures.rss_parked_mb = rss_mb(worker.pid)

        async def approve(name: str, interrupt: str) -> None:
            async with gate:
                sent = time.monotonic()
                ack = await keel.decide(name, interrupt, "approve")
                for _ in range(6000):
                    record = await keel.turn(name, ack.turn_id)
                    if record.status in ("completed", "failed", "cancelled"):
                        break
                    await asyncio.sleep(0.05)
                figures.approve_to_done_s.append(time.monotonic() - sent)
                if record.status != "completed":
                    figures.lost += 1

        started = time.monotonic()
        await asyncio.gather(*(approve(n, i) for n, i in zip(names, interrupts, strict=True)))
        figures.approve_wall_s = time.monotonic() - started
        for name in names:
            effects = (workdir / f"{name}.txt").read_text().splitlines()
            if effects != ["cycle", "approved"]:
                figures.doubled += 1
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    return figures


async def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="keel-parked-") as tmp:
        address = os.environ.get("TEMPORAL_ADDRESS")
        if address:
            client = await connect(address, os.environ.get("TEMPORAL_NAMESPACE", "default"))
            figures = await run_parked(client, args.sessions, Path(tmp))
        else:
            async with dev_server() as env:
                figures = await run_parked(env.client, args.sessions, Path(tmp))
    print("\n".join(figures.lines()), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
