"""The cold-resume benchmark, bounded and untimed: its plumbing, its counts and its lines."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.cold_resume import output, run_cold_resume

FIGURES = (
    "cold_resume_s",
    "cold_resume_max_s",
    "cold_resume_replay_s",
    "cold_resume_history_events",
    "cold_resume_runs",
)


async def test_cold_sessions_resume_after_a_worker_restart_and_finish_each_effect_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    figures, notes = await run_cold_resume(temporal_env.client, 10, [10_000, 40], 1, tmp_path)
    lines = output(figures, notes)
    print("\n".join(lines))
    default, small = figures
    for size in figures:
        assert [r.status for r in size.resumed] == ["completed"], size.resumed
        assert size.doubled == 0
        assert len(size.replay_s) == 1
    assert default.parked[0].runs == 1
    assert small.parked[0].runs > default.parked[0].runs
    assert small.parked[0].events < default.parked[0].events
    names = {line.split()[0] for line in lines if not line.startswith("#")}
    for size in figures:
        tag = f"[cycles=10,can_events={size.can_events}]"
        assert {name + tag for name in FIGURES} <= names
    assert all(len(line.split()) == 3 for line in lines if not line.startswith("#"))
    assert any(line.startswith("# fit of approve-to-done") for line in lines)
