"""Keel's side of the raw-floor comparison works, untimed.

``python -m tests.benchmarks.beside_raw_floor --raw-floor PATH`` runs an outside raw-Temporal
floor script beside Keel's same shape. The floor script is not part of this repository; Keel's
side is: here it runs its turns (a warm-up of 2 cycles, then 3 of 20) against the test's dev
server, in this process, and its figures come out finite and positive.
"""

from __future__ import annotations

import math
from pathlib import Path

from temporalio.client import Client

from tests.benchmarks.beside_raw_floor import keel_side


async def test_keels_side_runs_its_turns_and_measures_them(client: Client, tmp_path: Path) -> None:
    cpu_ms, wall_ms = await keel_side(client.service_client.config.target_host, tmp_path)
    assert math.isfinite(cpu_ms) and cpu_ms > 0
    assert math.isfinite(wall_ms) and wall_ms > 0
    assert len(list(tmp_path.glob("script-*.json"))) == 4  # the warm-up and 3 measured turns
