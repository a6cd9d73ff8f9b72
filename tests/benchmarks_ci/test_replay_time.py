"""The replay-time benchmark, bounded and untimed: its figures, and that no tool ran."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.replay_time import Shape, run_replay_time


async def test_replays_run_no_tool_and_print_their_figures(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    shape = Shape(sessions=2, turns=2, cycles=1, model_s=0.05, tool_s=0.2)
    lines = await run_replay_time(temporal_env.client, shape, tmp_path)
    print("\n".join(lines))
    figures = {line.split()[0]: float(line.split()[1]) for line in lines}
    tag = shape.tag
    assert figures[f"tools_run_in_replays{tag}"] == 0
    assert figures[f"replay_diverged{tag}"] == 0
    assert figures[f"original_session_s{tag}"] > 0 and figures[f"replay_session_s{tag}"] > 0
    assert all(len(line.split()) == 3 for line in lines)
