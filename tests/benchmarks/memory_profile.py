"""What a cached session holds in the worker: tracemalloc snapshots diffed, by traceback.

Runs a Keel worker in this process on its own dev server, warms it with two sessions, then
starts N sessions that each run a turn of ``--cycles`` tool cycles (one, as
``memory_per_cached_session`` in ``python3 -m tests.benchmarks``) and stay open in the
workflow cache. Prints the Python memory the N sessions added per session, and the
allocation sites that hold most of it, grouped by their innermost ``--frames`` frames.
Memory the SDK's Rust core holds is not seen by tracemalloc; the growth of the process's
RSS (which tracing itself inflates) is printed too. Usage::

    python -m tests.benchmarks.memory_profile --sessions 100 --top 25
    python -m tests.benchmarks.memory_profile --sessions 10 --cycles 50 --frames 4
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import tracemalloc
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.worker.process.assembly import build_worker, freeze_startup_heap
from tests.helpers.scripts import write_script
from tests.helpers.temporal import dev_server

# Sessions started at once: tracing every allocation slows workflow tasks down a lot.
BATCH = 10
FRAMES = 12


@dataclass
class Held:
    """What N cached sessions added to the worker's process, per session."""

    python_bytes: float
    rss_kb: float
    sites: list[tuple[str, float]]


def rss_kb() -> int:
    """Resident set size of this process, in KB (from /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


def tool_cycles(path: Path, cycles: int) -> str:
    """A script of tool cycles (512 characters back each) then a final answer."""
    use = {"name": "big_async", "input": {"size": 512}}
    responses = [
        {"content": [{"toolUse": {"toolUseId": f"t{i}", **use}}], "stopReason": "tool_use"}
        for i in range(cycles)
    ]
    responses.append({"content": [{"text": "done"}], "stopReason": "end_turn"})
    return write_script(path, responses)


async def measure(
    client: Client,
    sessions: int,
    cycles: int,
    workdir: Path,
    frames: int = 1,
    freeze: bool = True,
) -> Held:
    """Run ``sessions`` sessions of one turn each, left in the cache; what they hold.

    ``freeze``: freeze the startup heap out of the GC once the worker is built, as
    ``keel worker`` does (a test leaves its process as it is).
    """
    store = open_store(str(workdir / "store"))
    queue = f"mem-{uuid.uuid4().hex[:8]}"
    keel = KeelClient(client, queue, store)
    config = SessionConfig(
        model=tool_cycles(workdir / "script.json", cycles), tool_modules=["tests.sample_tools"]
    )
    worker = build_worker(
        client, queue, ["tests.sample_tools"], store=store, max_cached_workflows=sessions + 20
    )
    if freeze:
        freeze_startup_heap()
    async with worker:
        for i in range(2):
            await keel.run(f"warm-{i}-{queue}", "go", config=config, timeout_s=120)
        gc.collect()
        tracemalloc.start(max(frames, FRAMES))
        try:
            before, rss_before = tracemalloc.take_snapshot(), rss_kb()
            ids = [f"mem-{i}-{queue}" for i in range(sessions)]
            for start in range(0, len(ids), BATCH):
                batch = ids[start : start + BATCH]
                done = await asyncio.gather(
                    *(keel.run(s, "go", config=config, timeout_s=900) for s in batch)
                )
                assert all(r.status == "completed" for r in done), done
            await asyncio.sleep(1)
            gc.collect()
            after, rss_after = tracemalloc.take_snapshot(), rss_kb()
        finally:
            tracemalloc.stop()
    stats = after.compare_to(before, "traceback")
    sites: dict[str, int] = {}
    for stat in stats:
        inner = list(stat.traceback)[-frames:][::-1]
        key = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in inner)
        sites[key] = sites.get(key, 0) + stat.size_diff
    ranked = sorted(sites.items(), key=lambda kv: -kv[1])
    return Held(
        python_bytes=sum(s.size_diff for s in stats) / sessions,
        rss_kb=(rss_after - rss_before) / sessions,
        sites=[(key, size / sessions) for key, size in ranked],
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=1, help="tool cycles of each turn")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--frames", type=int, default=1, help="frames per group")
    args = parser.parse_args()
    async with dev_server() as env:
        with tempfile.TemporaryDirectory() as tmp:
            held = await measure(env.client, args.sessions, args.cycles, Path(tmp), args.frames)
    print(f"python_memory_per_cached_session {held.python_bytes / 1024:.1f} KB")
    print(f"rss_per_cached_session {held.rss_kb:.1f} KB")
    for key, size in held.sites[: args.top]:
        print(f"{size:9.0f} B/session  {key}")


if __name__ == "__main__":
    asyncio.run(main())
