"""The benchmark runner works, in a tiny version: no timed assertions.

It checks that every output line is ``figure value unit`` (or a ``#`` note), that each
figure comes for Keel, for the floor and as their ratio, and that Keel's history per cycle
does not grow with the number of cycles while the floor's does. The in-process run has a
peer (``--peer``), a stand-in: the floor's worker under another name, run by this
interpreter instead of a venv's (``test_peer.py`` has the real one).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.benchmarks import runner
from tests.benchmarks.floor import MODEL_ACTIVITY, WORKFLOW
from tests.benchmarks.peer import Peer
from tests.benchmarks.runner import CYCLES_TO_LIMIT, Options, run

ROOT = Path(__file__).resolve().parents[2]

FIGURES = [
    "cycle_latency",
    "turn_wall_per_cycle",
    "worker_cpu_per_cycle[sessions=1]",
    "worker_cpu_per_cycle[cycles=3]",
    "history_bytes_fixed",
    "history_bytes_per_cycle[cycles=10]",
    "history_bytes_per_cycle[cycles=40]",
    "throughput[sessions=3]",
    "worker_cpu_per_cycle[sessions=3]",
    "replay[cycles=5]",
    "replay_cold[cycles=5]",
    "memory_per_cached_session",
]
# The figures a peer has too (not throughput or replay).
PEER_FIGURES = [
    "cycle_latency",
    "worker_cpu_per_cycle[sessions=1]",
    "worker_cpu_per_cycle[cycles=3]",
    "history_bytes_per_cycle[cycles=40]",
    CYCLES_TO_LIMIT,
    "memory_per_cached_session",
]
# The floor's worker as a peer: what the runner does with a peer, without making a venv.
STANDIN = Peer(
    name="standin",
    requirements=(),
    module="tests.benchmarks.worker",
    args=("floor",),
    workflow=WORKFLOW,
    model_activity=MODEL_ACTIVITY,
    probe="tests.benchmarks.floor",
    versions_of=("temporalio",),
)


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
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[Peer, Path]] = []

    def this_interpreter(peer: Peer, venv: Path, version: str) -> tuple[Path, str]:
        made.append((peer, venv))
        return Path(sys.executable), f"{peer.name}: this interpreter"

    monkeypatch.setitem(runner.PEERS, STANDIN.name, STANDIN)
    monkeypatch.setattr(runner, "ensure_venv", this_interpreter)
    options = Options(
        latency_cycles=2,
        repeats=1,
        history_cycles=[10, 40],
        sessions=[3],
        throughput_cycles=2,
        throughput_repeats=1,
        settle_s=0.5,
        replay_cycles=5,
        replay_repeats=1,
        cpu_cycles=3,
        cpu_rounds=2,
        memory_sessions=3,
        memory_steps=2,
        parked=4,
        cold_resume_cycles=3,
        cold_resume_can_events=[10_000, 40],
        cold_resume_repeats=1,
        peer=STANDIN.name,
        peer_venv=tmp_path,
        markdown=tmp_path / "table.md",
    )
    lines: list[str] = []
    address = temporal_env.client.service_client.config.target_host
    await run(options, lines.append, address=address)
    figures = parse(lines)
    for name in FIGURES:
        for system in ("keel", "floor", "ratio"):
            assert f"{system}.{name}" in figures, f"{system}.{name} missing:\n" + "\n".join(lines)

    assert made == [(STANDIN, tmp_path)]
    assert "# peer: standin: this interpreter" in lines
    for name in PEER_FIGURES:
        for system in ("standin", "ratio_standin"):
            assert f"{system}.{name}" in figures, f"{system}.{name} missing:\n" + "\n".join(lines)
    assert not any(f.startswith("standin.throughput") for f in figures)
    assert "standin.replay[cycles=5]" not in figures
    # The stand-in is the floor in a process of its own: the same history but for its ids.
    for name in ["history_bytes_fixed", "history_bytes_per_cycle[cycles=40]"]:
        standin, floor = figures[f"standin.{name}"][0], figures[f"floor.{name}"][0]
        assert standin == pytest.approx(floor, rel=0.02), name
    assert figures[f"standin.{CYCLES_TO_LIMIT}"][0] < figures[f"keel.{CYCLES_TO_LIMIT}"][0]
    table = (tmp_path / "table.md").read_text()
    assert "| figure | Keel | floor | standin | Keel / floor | Keel / standin |" in table
    assert any(line.startswith("# server:") and "persistence=" in line for line in lines)
    runs = next(line for line in lines if line.startswith("# throughput[sessions=3] runs"))
    assert runs.count("keel ") == 1 and runs.count("floor ") == 1, runs
    assert figures["ratio.throughput_paired[sessions=3]"][1] == "x"
    assert any("side by side: Keel ahead in" in line and "of 1 pair of" in line for line in lines)

    # The CPU figure: a spread line per system, and the median of round-by-round ratios.
    for system in ("keel", "floor", "standin"):
        spread = f"# worker_cpu_per_cycle[cycles=3] {system} over 2 rounds, ms: lowest"
        assert any(line.startswith(spread) for line in lines), system
    assert "ratio_rounds.worker_cpu_per_cycle[cycles=3]" in figures
    assert "ratio_rounds_standin.worker_cpu_per_cycle[cycles=3]" in figures
    assert figures["keel.worker_cpu_per_cycle[cycles=3]"][0] > 0
    # The memory figure is a slope through the readings after each of the two steps.
    readings = next(line for line in lines if line.startswith("# memory_per_cached_session keel"))
    assert "3 sessions" in readings and "6 sessions" in readings, readings

    # The parked figures, side by side with the floor, on the runner's server.
    for name in ("parked_alone_approve_to_done_p99_s", "parked_approvals_per_s"):
        assert f"ratio.{name}" in figures, name
    assert figures["keel.parked_lost"][0] == figures["floor.parked_lost"][0] == 0
    assert figures["keel.parked_doubled"][0] == figures["floor.parked_doubled"][0] == 0

    # Cold resume: Keel's figures only, at each continue-as-new size.
    for size in (10_000, 40):
        assert f"keel.cold_resume_s[cycles=3,can_events={size}]" in figures, size
        assert f"floor.cold_resume_s[cycles=3,can_events={size}]" not in figures, size

    keel_10 = figures["keel.history_bytes_per_cycle[cycles=10]"][0]
    keel_40 = figures["keel.history_bytes_per_cycle[cycles=40]"][0]
    assert abs(keel_40 - keel_10) / keel_10 < 0.15, (keel_10, keel_40)
    floor_10 = figures["floor.history_bytes_per_cycle[cycles=10]"][0]
    floor_40 = figures["floor.history_bytes_per_cycle[cycles=40]"][0]
    assert floor_40 > 1.5 * floor_10, (floor_10, floor_40)


def test_the_command_starts_its_own_server_and_reports_its_cpu(tmp_path: Path) -> None:
    # As README says to run it, tiny: the runner starts (and stops) its own dev server.
    command = [sys.executable, "-m", "tests.benchmarks", *TINY, "--markdown", "table.md"]
    done = subprocess.run(
        command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    server = next(line for line in lines if line.startswith("# server:"))
    assert "persistence=memory" in server and "transferProcessorMaxPollRPS=1000" in server
    figures = parse(lines)
    for system in ("keel", "floor", "ratio"):
        assert f"{system}.server_cpu_per_cycle[sessions=2]" in figures, done.stdout
        assert figures[f"{system}.server_cpu_per_cycle[sessions=2]"][0] > 0
    assert "server_cpu_per_cycle[sessions=2]" in (tmp_path / "table.md").read_text()


TINY = [
    *("--repeats", "1", "--latency-cycles", "2", "--history-cycles", "5"),
    *("--sessions", "2", "--throughput-cycles", "2", "--throughput-repeats", "1"),
    *("--settle", "0.5", "--cpu-rounds", "1", "--cpu-cycles", "2"),
    *("--replay-cycles", "3", "--replay-repeats", "1", "--memory-sessions", "0"),
    *("--parked", "0", "--cold-resume-cycles", "0"),
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env
