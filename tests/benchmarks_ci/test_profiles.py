"""The profilers of history, replay and memory work, in a tiny version: no timed assertions."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.history import RESULT_BYTES
from tests.benchmarks.history_profile import profile, record, report
from tests.benchmarks.memory_profile import measure
from tests.benchmarks.replay_profile import profiled, timed
from tests.benchmarks.replay_profile import record as record_replay


async def test_history_profile_splits_event_types_and_keeps_tool_results_out(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    cycles = 5
    events = await record(temporal_env.client, cycles, tmp_path)
    rows = profile(events)
    assert sum(r.total for r in rows.values()) == sum(e.ByteSize() for e in events)
    assert all(0 < r.payload < r.total for r in rows.values() if r.payload)
    assert rows["ACTIVITY_TASK_SCHEDULED"].events == 2 * cycles + 1  # a model call, a tool
    # each tool returns 2 KB, stored by the tool activity: its content is not in history
    completed = rows["ACTIVITY_TASK_COMPLETED"]
    assert completed.payload < cycles * RESULT_BYTES, completed
    assert len(report(rows, cycles)) == len(rows) + 2


async def test_replay_profile_times_and_profiles_the_workflow_thread(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    history = await record_replay(temporal_env.client, 3, tmp_path)
    assert await timed(history, 1) > 0
    stats = await profiled(history)
    files = {Path(filename).name for filename, _, _ in stats.stats}  # type: ignore[attr-defined]
    assert "session.py" in files, sorted(files)


async def test_memory_profile_names_what_cached_sessions_hold(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    held = await measure(temporal_env.client, 3, 1, tmp_path, freeze=False)
    assert held.python_bytes > 0
    assert held.sites and held.sites[0][1] > 0
    assert all(":" in site for site, _ in held.sites)
