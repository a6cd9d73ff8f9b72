"""Keel's worker CPU per cycle beside an outside raw-Temporal floor script, on one dev server.

Issue 45 asks for Keel's worker CPU per cycle against the raw floor that outside checks use (a
script of one workflow with one ``model`` and one ``tool`` activity per cycle, default data
converter and sandbox, worker and client in one process, whose ``latency`` figure prints
``raw_latency_process_cpu_per_cycle_ms_median``: the process's CPU per cycle over a 20-cycle
turn, the median of 3 turns after a warm-up). This runs that script and Keel's same shape
(``keel_side``: ``build_worker`` and ``KeelClient`` in one process, the scripted model asking
for ``big_async`` of 2,000 bytes 20 times, then ending the turn; a warm-up turn of 2 cycles),
each in a fresh process, in alternating rounds (raw, Keel, Keel, raw, ...) against one dev
server, and prints every round and the medians:

- ``cpu_per_cycle_ms[system]``: the median over the rounds of each round's figure;
- ``wall_per_cycle_ms[system]``: likewise for the turn's wall time per cycle;
- ``cpu_per_cycle_ratio``: Keel / raw, the median of the per-round ratios (pairs in order).

Usage::

    python3 -m tests.benchmarks.beside_raw_floor --raw-floor PATH/raw_floor.py [--rounds 4]

Keel runs with its defaults (the 30 s heartbeat timeout: no heartbeats in these quick calls
either way), its conversation store in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from keel import KeelClient, SessionConfig, connect, open_store
from keel.worker.process.assembly import build_worker
from tests.benchmarks.server import bench_server
from tests.helpers.scripts import respond, text, tool_use, write_script

CYCLES = 20
RESULT_BYTES = 2000
RUNS = 3
SYSTEMS = ("raw", "keel")
MODULE = "tests.benchmarks.beside_raw_floor"


async def keel_side(address: str, workdir: Path) -> tuple[float, float]:
    """Keel's figure, as the raw script measures its own: (CPU ms, wall ms) per cycle."""
    client = await connect(address, "default")
    store = open_store(str(workdir / "store"))
    queue = f"beside-{uuid.uuid4().hex[:8]}"
    keel = KeelClient(client, queue, store)

    def config(cycles: int) -> SessionConfig:
        asks = [
            respond(tool_use(f"t{i}", "big_async", size=RESULT_BYTES), stop="tool_use")
            for i in range(cycles)
        ]
        script = workdir / f"script-{uuid.uuid4().hex[:6]}.json"
        return SessionConfig(model=write_script(script, [*asks, respond(text("done"))]))

    async def turn(cycles: int) -> tuple[float, float]:
        session = f"beside-{uuid.uuid4().hex[:10]}"
        chosen = config(cycles)
        cpu, wall = time.process_time(), time.perf_counter()
        record = await keel.run(session, "go", config=chosen, timeout_s=300)
        assert record.status == "completed", record
        return (time.process_time() - cpu) * 1000 / cycles, (
            time.perf_counter() - wall
        ) * 1000 / cycles

    async with build_worker(client, queue, ["tests.sample_tools"], store=store):
        await turn(2)  # warm-up, as the raw script's
        runs = [await turn(CYCLES) for _ in range(RUNS)]
    return statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)


def _run(system: str, address: str, raw_floor: Path, workdir: Path) -> tuple[float, float]:
    """One round of one system, in a fresh process: (CPU ms, wall ms) per cycle."""
    if system == "raw":
        command = [sys.executable, str(raw_floor), "--address", address, "--figures", "latency"]
    else:
        command = [sys.executable, "-m", MODULE, "--keel-side", address, str(workdir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{system} side failed ({done.returncode}): {done.stderr[-2000:]}")
    figures = dict(line.split(" ")[:2] for line in done.stdout.splitlines() if " " in line)
    if system == "raw":
        return (
            float(figures["raw_latency_process_cpu_per_cycle_ms_median"]),
            float(figures["raw_latency_per_cycle_ms_median"]),
        )
    return float(figures["keel_cpu_per_cycle_ms"]), float(figures["keel_wall_per_cycle_ms"])


def main() -> None:
    """Run the rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--raw-floor", type=Path, help="the outside raw_floor.py")
    parser.add_argument("--rounds", type=int, default=4, help="rounds (pairs) of both systems")
    parser.add_argument(
        "--keel-side", nargs=2, metavar=("ADDRESS", "DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.keel_side:
        cpu, wall = asyncio.run(keel_side(args.keel_side[0], Path(args.keel_side[1])))
        print(f"keel_cpu_per_cycle_ms {cpu:.3f} ms")
        print(f"keel_wall_per_cycle_ms {wall:.3f} ms")
        return
    if args.raw_floor is None or not args.raw_floor.is_file():
        parser.error("--raw-floor must name the raw floor script")
    for line in asyncio.run(beside(args.raw_floor, args.rounds)):
        print(line, flush=True)


async def beside(raw_floor: Path, rounds: int) -> list[str]:
    """The rounds, on a fresh dev server; the figures' lines (and a ``#`` line per round)."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="keel-beside-") as tmp:
        async with bench_server("memory", Path(tmp), ()) as server:
            got: dict[str, list[tuple[float, float]]] = {s: [] for s in SYSTEMS}
            for round_ in range(rounds):
                for system in SYSTEMS if round_ % 2 == 0 else SYSTEMS[::-1]:
                    cpu, wall = await asyncio.to_thread(
                        _run, system, server.address, raw_floor, Path(tmp)
                    )
                    got[system].append((cpu, wall))
                    lines.append(f"# round {round_ + 1} {system}: {cpu:.2f} ms CPU, {wall:.2f} ms")
    for system in SYSTEMS:
        cpu = statistics.median(c for c, _ in got[system])
        wall = statistics.median(w for _, w in got[system])
        lines.append(f"cpu_per_cycle_ms[{system}] {cpu:.3f} ms")
        lines.append(f"wall_per_cycle_ms[{system}] {wall:.3f} ms")
    ratios = [k[0] / r[0] for k, r in zip(got["keel"], got["raw"], strict=True)]
    lines.append(f"cpu_per_cycle_ratio {statistics.median(ratios):.3f} keel/raw")
    return lines

if __name__ == "__main__":
    main()
