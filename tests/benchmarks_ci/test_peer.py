"""``--peer strands``, in a tiny version: its venv, its worker, its lines; no timed assertions.

The real Strands peer makes its venv from PyPI first (45 to 95 s on 2 cores; 70 to 105 s
for the whole test), so its test is marked slow and runs only with ``KEEL_TEST_PEER=1``.
Without it: the runner's peer plumbing, with a stand-in peer (in ``test_runner.py``, on the
tiny run there), the formula of the longest turn, the command line, and the venv's guard
against replacing a directory it did not make.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import temporalio
from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.peer import MARKER, STRANDS, ensure_venv, longest_turn
from tests.benchmarks.runner import CYCLES_TO_LIMIT, Options, parse, run
from tests.benchmarks_ci.test_runner import parse as parse_lines

LIMIT = 50 * 1024 * 1024
TINY = Options(
    latency_cycles=2,
    repeats=1,
    history_cycles=[3, 6],
    sessions=[],
    replay_cycles=2,
    replay_repeats=1,
    cpu_rounds=0,
    memory_sessions=0,
    parked=0,
    cold_resume_cycles=0,
)


def test_the_longest_turn_solves_the_quadratic_through_the_two_largest_counts() -> None:
    # p(N) = 1000 + 10 N: history fixed + 1000 N + 10 N^2; the count of 10 is left out.
    per_cycle = {10: 99_999.0, 100: 2000.0, 300: 4000.0}
    n = longest_turn(500.0, per_cycle, LIMIT)
    assert n is not None
    assert 500 + 1000 * n + 10 * n * n == pytest.approx(LIMIT)
    # flat (or shrinking) history per cycle: linear
    flat = longest_turn(500.0, {100: 3000.0, 300: 2990.0}, LIMIT)
    assert flat == pytest.approx((LIMIT - 500) / 2990.0)
    assert longest_turn(500.0, {100: 3000.0}, LIMIT) is None


def test_a_directory_the_benchmark_did_not_make_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(RuntimeError, match=f"not made by the benchmark \\(no {MARKER}\\)"):
        ensure_venv(STRANDS, tmp_path, "1.0.0")
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_the_command_line_takes_the_peer_and_its_venv(tmp_path: Path) -> None:
    assert parse([]).peer is None
    options = parse(["--peer", "strands", "--peer-venv", str(tmp_path)])
    assert (options.peer, options.peer_venv) == ("strands", tmp_path)
    with pytest.raises(SystemExit):
        parse(["--peer", "langgraph"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(
    os.environ.get("KEEL_TEST_PEER") != "1",
    reason="makes the Strands venv from PyPI (about 45 s); KEEL_TEST_PEER=1 runs it",
)
async def test_the_strands_peer_runs_in_its_own_venv_beside_keel_and_the_floor(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> None:
    venv = tmp_path_factory.mktemp("peer") / "strands-venv"
    markdown = tmp_path_factory.mktemp("peer") / "table.md"
    options = Options(**{**vars(TINY), "peer": "strands", "peer_venv": venv, "markdown": markdown})
    lines: list[str] = []
    address = temporal_env.client.service_client.config.target_host
    await run(options, lines.append, address=address)
    figures = parse_lines(lines)
    made = next(line for line in lines if line.startswith("# peer: strands venv"))
    assert "made in" in made and "temporalio-strands-agents 0.1.0" in made, made
    for name in [
        "cycle_latency",
        "turn_wall_per_cycle",
        "worker_cpu_per_cycle[sessions=1]",
        "history_bytes_fixed",
        "history_bytes_per_cycle[cycles=3]",
        "history_bytes_per_cycle[cycles=6]",
        CYCLES_TO_LIMIT,
    ]:
        for system in ("keel", "floor", "strands", "ratio", "ratio_strands"):
            assert f"{system}.{name}" in figures, f"{system}.{name} missing:\n" + "\n".join(lines)
    # Replay stays Keel against the floor.
    assert "strands.replay[cycles=2]" not in figures and "keel.replay[cycles=2]" in figures
    # Strands sends the whole conversation with every model call: its history per cycle grows.
    strands_3 = figures["strands.history_bytes_per_cycle[cycles=3]"][0]
    strands_6 = figures["strands.history_bytes_per_cycle[cycles=6]"][0]
    assert strands_6 > 1.2 * strands_3, (strands_3, strands_6)
    assert figures[f"strands.{CYCLES_TO_LIMIT}"][0] < figures[f"keel.{CYCLES_TO_LIMIT}"][0]
    table = markdown.read_text()
    assert "| figure | Keel | floor | strands | Keel / floor | Keel / strands |" in table

    # The next run finds the venv and uses it as it is.
    _, reused = ensure_venv(STRANDS, venv, temporalio.__version__)
    assert "(reused)" in reused, reused
