"""The benchmark runner works, in a tiny version: no timed assertions.

It checks that every output line is ``figure value unit`` (or a ``#`` note), that each
figure comes for Keel, for the floor and as their ratio, and that Keel's history per cycle
does not grow with the number of cycles while the floor's does.
"""

from __future__ import annotations

import math

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.runner import Options, run

FIGURES = [
    "cycle_latency",
    "turn_wall_per_cycle",
    "worker_cpu_per_cycle[sessions=1]",
    "history_bytes_fixed",
    "history_bytes_per_cycle[cycles=10]",
    "history_bytes_per_cycle[cycles=40]",
    "throughput[sessions=3]",
    "worker_cpu_per_cycle[sessions=3]",
    "replay[cycles=5]",
    "replay_cold[cycles=5]",
    "memory_per_cached_session",
]


def parse(lines: list[str]) -> dict[str, tuple[float, str]]:
    figures: dict[str, tuple[float, str]] = {}
    for line in lines:
        if line.startswith("# "):
            continue
        name, value, unit = line.split(" ")
        assert math.isfinite(float(value)), line
        assert name not in figures, f"{name} printed twice"
        figures[name] = (float(value), unit)
    return figures


async def test_runner_prints_every_figure_and_history_per_cycle_stays_flat(
    temporal_env: WorkflowEnvironment,
) -> None:
    options = Options(
        latency_cycles=2,
        repeats=1,
        history_cycles=[10, 40],
        sessions=[3],
        throughput_cycles=2,
        replay_cycles=5,
        replay_repeats=1,
        memory_sessions=3,
    )
    lines: list[str] = []
    address = temporal_env.client.service_client.config.target_host
    await run(options, lines.append, address=address)
    figures = parse(lines)
    for name in FIGURES:
        for system in ("keel", "floor", "ratio"):
            assert f"{system}.{name}" in figures, f"{system}.{name} missing:\n" + "\n".join(lines)
    assert any(line.startswith("# server:") and "persistence=" in line for line in lines)

    keel_10 = figures["keel.history_bytes_per_cycle[cycles=10]"][0]
    keel_40 = figures["keel.history_bytes_per_cycle[cycles=40]"][0]
    assert abs(keel_40 - keel_10) / keel_10 < 0.15, (keel_10, keel_40)
    floor_10 = figures["floor.history_bytes_per_cycle[cycles=10]"][0]
    floor_40 = figures["floor.history_bytes_per_cycle[cycles=40]"][0]
    assert floor_40 > 1.5 * floor_10, (floor_10, floor_40)
