"""The parked-sessions benchmark, bounded and untimed: its plumbing and its must-be-zeros."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.benchmarks.parked import ParkedFigures, SideBySide, parked_side_by_side

SESSIONS = 8
# Printed for keel, floor and their ratio.
RATIOS = [
    "parked_park_s",
    "parked_sessions_per_s",
    "parked_worker_rss_mb_before",
    "parked_worker_rss_mb",
    "parked_rss_kb_per_session",
    "parked_approve_to_done_p50_s",
    "parked_approve_to_done_p99_s",
    "parked_approvals_per_s",
    "parked_alone_approve_to_done_p50_s",
    "parked_alone_approve_to_done_p99_s",
    "parked_server_cpu_park_ms_per_session",
    "parked_server_cpu_approve_ms_per_session",
]
# Printed for keel and floor only: counts, and the must-be-zeros.
COUNTS = ["parked_sessions", "parked_lost", "parked_doubled"]


def own_server_pid(address: str) -> int | None:
    """The pid of the dev server this process started listening at ``address``, if any."""
    port = address.rsplit(":", 1)[1].encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent != os.getpid() or b"start-dev" not in command or b"--port" not in command:
            continue
        if command[command.index(b"--port") + 1] == port:
            return int(entry.name)
    return None


def figure_names(lines: list[str]) -> list[str]:
    """The first word of each figure line, ``#`` notes left out."""
    return [line.split()[0] for line in lines if not line.startswith("#")]


async def test_parked_sessions_on_keel_and_the_floor_finish_each_effect_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    pid = own_server_pid(address)
    assert pid is not None, "the session's dev server was not found under /proc"
    result = await parked_side_by_side(address, pid, None, SESSIONS, tmp_path, settle_s=0)
    lines = result.lines()
    print("\n".join(lines))
    for side in (result.keel, result.floor):
        assert side.lost == 0 and side.doubled == 0
        # a quarter approved one at a time, the rest together: each once
        assert len(side.alone_s) == SESSIONS // 4
        assert len(side.approve_to_done_s) + len(side.alone_s) == SESSIONS
        assert side.rss_parked_mb > 0
        assert [n for n, _ in side.rss_steps] == list(range(1, SESSIONS + 1))
    names = figure_names(lines)
    for name in RATIOS:
        assert [f"keel.{name}", f"floor.{name}", f"ratio.{name}"] == [
            n for n in names if n.split(".", 1)[1] == name
        ]
    for name in COUNTS:
        assert [f"keel.{name}", f"floor.{name}"] == [n for n in names if n.split(".", 1)[1] == name]
    assert len(names) == 3 * len(RATIOS) + 2 * len(COUNTS)
    assert all(len(line.split()) == 3 for line in lines if not line.startswith("#"))
    assert any("DB size unknown" in line for line in lines if line.startswith("#"))
    assert any(line.startswith("# keel worker RSS while parking: 1 parked") for line in lines)


def test_db_figures_need_a_db_and_a_floor_of_zero_gives_no_ratio() -> None:
    keel = ParkedFigures(sessions=4, db_mb_start=1.0, db_mb_parked=1.5, db_mb_end=2.0)
    floor = ParkedFigures(sessions=4, db_mb_start=2.0, db_mb_parked=2.25, db_mb_end=2.5)
    lines = SideBySide(keel=keel, floor=floor, notes=["what ran"]).lines()
    assert lines[0] == "# what ran"
    assert "keel.parked_server_db_kb_per_session 256.0 KB" in lines
    assert "floor.parked_server_db_kb_per_session 128.0 KB" in lines
    assert "ratio.parked_server_db_kb_per_session 2.00 x" in lines
    assert "floor.parked_server_db_mb_end 2.50 MB" in lines
    assert not any(line.startswith("ratio.parked_server_db_mb") for line in lines)
    assert "ratio.parked_rss_kb_per_session nan x" in lines
    assert not any("server_cpu" in line for line in lines)
