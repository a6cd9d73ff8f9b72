"""The parked-sessions benchmark, bounded and untimed: its plumbing and its must-be-zeros."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.parked import run_parked


async def test_parked_sessions_are_approved_and_finish_each_effect_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    figures = await run_parked(temporal_env.client, 8, tmp_path)
    lines = figures.lines()
    print("\n".join(lines))
    assert figures.lost == 0 and figures.doubled == 0
    assert len(figures.approve_to_done_s) == 8
    assert figures.rss_parked_mb > 0
    names = [line.split()[0] for line in lines]
    assert "parked_approve_to_done_p99_s" in names and "parked_rss_kb_per_session" in names
