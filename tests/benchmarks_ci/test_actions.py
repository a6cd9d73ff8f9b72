"""The Actions benchmark works, in a tiny version: counts by type, no timed assertions.

``python -m tests.benchmarks.actions`` prints what a fleet pays Temporal. Here one Keel side
(0.1 s model calls and tools, ``KeelClient.run`` waiting) and the floor run two tool cycles
each on a fresh dev server: the per-type counts are there, the floor pays exactly its two
activity starts a cycle, Keel at least as many, and the figure lines and the markdown carry
both.
"""

from __future__ import annotations

from tests.benchmarks.action_meter import Actions, parse_actions
from tests.benchmarks.action_recovery import ACTIVITY_START
from tests.benchmarks.action_report import lines, markdown
from tests.benchmarks.actions import parse_args, run

METRICS = """\
# TYPE action counter
action{action_type="grpc_StartWorkflowExecution",namespace="temporal_system",operation="x"} 2
action{action_type="grpc_QueryWorkflow",namespace="default",operation="QueryWorkflow"} 24
action{action_type="command_ScheduleActivityTask",namespace="default",operation="y"} 5
service_requests{operation="QueryWorkflow",namespace="default"} 99
"""


def test_the_meter_reads_one_namespace_by_type_and_diffs() -> None:
    before = parse_actions(METRICS, "default")
    assert before == {"grpc_QueryWorkflow": 24, "command_ScheduleActivityTask": 5}
    after = Actions({**before, "grpc_QueryWorkflow": 30})
    assert after.minus(before) == {"grpc_QueryWorkflow": 6}
    assert after.minus(before).total == 6


async def test_actions_per_cycle_of_keel_and_the_floor() -> None:
    args = parse_args(
        ["--systems", "keel,floor", "--clients", "client", "--cycles", "2"]
        + ["--model-delays", "0.1", "--tool-delays", "0.1", "--idle-s", "0"]
        + ["--parked-s", "0", "--heartbeat-timeouts", ""]
    )
    report = await run(args)
    rows = {row.system: row for row in report.cycles}
    assert set(rows) == {"keel", "floor"}
    floor = rows["floor"].per_cycle()
    assert floor[ACTIVITY_START] == 2 and floor.total == 2, floor
    # the floor's turn: its start, three model calls and two tool runs, nothing else
    assert rows["floor"].turn == {"grpc_StartWorkflowExecution": 1, ACTIVITY_START: 5}
    keel = rows["keel"].per_cycle()
    assert keel[ACTIVITY_START] == 2, keel  # a model call and a tool run a cycle
    assert 2 <= keel.total < 20, keel  # whatever the waiting client adds, within reason
    assert rows["keel"].base.total >= 2  # the session's start and its one model call at least
    printed = lines(report)
    assert any(line.startswith("actions_per_cycle[system=keel,client=client,") for line in printed)
    assert any(line.startswith("per_cycle_over_floor[system=keel,") for line in printed)
    for line in printed:
        if not line.startswith("#"):
            _name, value, _unit = line.split(" ")
            float(value)
    table = markdown(report)
    assert "| 0.1 s | 0.1 s | floor | result | 2.0 |" in table
