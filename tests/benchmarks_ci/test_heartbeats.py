"""The heartbeat benchmark works, in a tiny version: no timed assertions.

``python -m tests.benchmarks.heartbeats`` prints the price of quick crash recovery, legacy
timeouts against today's. Here it runs with two sessions: every figure comes for both sides
and as their ratio, every turn completes, and the server counted more heartbeats per running
tool under issue 23's 2 s heartbeat timeout than under the legacy 10 s one.
"""

from __future__ import annotations

import math

from tests.benchmarks.heartbeats import parser, run


async def test_heartbeat_benchmark_prints_both_sides_and_their_ratio() -> None:
    args = parser().parse_args(
        ["--sessions", "2", "--hold", "5", "--window", "3", "--rounds", "1"]
        + ["--cycles", "1", "--cycle-sessions", "2"]
    )
    lines = await run(args)
    assert lines[0].startswith("# 2 sessions")
    figures: dict[str, float] = {}
    for line in lines[1:]:
        name, value, _unit = line.split(" ")
        figures[name] = float(value)
    for figure in ("heartbeat_rpcs_per_activity_s[tool]", "server_cpu_cores[model]"):
        for side in ("legacy", "new"):
            assert math.isfinite(figures[f"{figure}[{side}]"]), figure
        assert f"{figure}[new/legacy]" in figures  # inf when the legacy side counted none
    assert figures["failed_turns[legacy]"] == figures["failed_turns[new]"] == 0
    assert figures["running_activities[tool][new]"] > 0
    # a tool beats every 3.3 s under the legacy timeout, every 0.67 s today: in a 3 s window
    # that is at most one beat against about four (a 1.5 s window could see one beat on each
    # side on a busy machine)
    rates = figures["heartbeat_rpcs_per_activity_s[tool][new]"]
    assert rates > figures["heartbeat_rpcs_per_activity_s[tool][legacy]"]
