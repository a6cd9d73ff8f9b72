"""N concurrent sessions of tool cycles on one worker: all complete, no message lost.

``KEEL_LOAD_SESSIONS`` (default 50) and ``KEEL_LOAD_CYCLES`` (default 3) change the load; the
soak mode, for longer runs outside CI, is ``python -m tests.benchmarks.load --soak-seconds S``.
Figures are printed (visible with ``-s``) and written to ``load-figures.txt`` in the test's
temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client

from keel import ConversationStore
from tests.benchmarks.load import LoadFigures, run_load
from tests.helpers.fixture_types import RunWorker

SESSIONS = int(os.environ.get("KEEL_LOAD_SESSIONS", "50"))
CYCLES = int(os.environ.get("KEEL_LOAD_CYCLES", "3"))


def report(figures: LoadFigures, where: Path) -> None:
    lines = figures.lines()
    (where / "load-figures.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def assert_nothing_lost(figures: LoadFigures, turns: int) -> None:
    problems = "\n".join(figures.problems[:10])
    assert figures.turns_failed == 0, problems
    assert figures.turns_completed == turns, problems
    assert figures.messages_lost == 0, problems
    assert figures.messages_duplicated == 0, problems
    assert figures.dangling_seen == 0, problems
    assert figures.samples > 0, "the S5 sampler never read a session"


async def test_concurrent_sessions_lose_nothing(
    client: Client, task_queue: str, store: ConversationStore, run_worker: RunWorker, tmp_path: Path
) -> None:
    async with run_worker(max_cached_workflows=max(1000, 2 * SESSIONS)):
        figures = await run_load(
            client, task_queue, store, tmp_path, sessions=SESSIONS, cycles=CYCLES, turns=1
        )
    report(figures, tmp_path)
    assert_nothing_lost(figures, SESSIONS)
    assert len(figures.latencies) == SESSIONS
    assert figures.percentile(0.99) < 60, "p99 turn latency"


async def test_soak_mode_keeps_n_sessions_running(
    client: Client, task_queue: str, store: ConversationStore, run_worker: RunWorker, tmp_path: Path
) -> None:
    """A few seconds of the soak mode: each slot starts session after session, two turns each."""
    async with run_worker(max_cached_workflows=1000):
        figures = await run_load(
            client, task_queue, store, tmp_path, sessions=4, cycles=1, turns=2, soak_s=3.0
        )
    report(figures, tmp_path)
    assert figures.turns_completed >= 8 and figures.turns_completed % 2 == 0
    assert_nothing_lost(figures, figures.turns_completed)
