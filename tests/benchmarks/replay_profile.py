"""Where replaying a long session's history goes: timed, then under cProfile.

Records one Keel session of N tool cycles (the workload of ``replay[cycles=N]`` in
``python3 -m tests.benchmarks``: the scripted model, the ``big_async`` tool returning 512
characters a cycle) on its own dev server, then replays its history with Keel's replayer
(``--repeats`` times, after one warm-up) and prints the median, the history's size and,
with ``--profile``, the functions that take most of one more replay in the thread that runs
the workflow's activations. Usage::

    python -m tests.benchmarks.replay_profile --cycles 200 --repeats 5 --profile 25
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from keel import AgentSession
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.sandbox import sandbox_runner
from tests.benchmarks.history import loop_session
from tests.helpers.scripts import write_script
from tests.helpers.temporal import dev_server

RESULT_SIZE = 512


def script(path: Path, cycles: int) -> str:
    """A scripted model of ``cycles`` tool cycles, then a final answer."""
    use = {"name": "big_async", "input": {"size": RESULT_SIZE}}
    responses = [
        {"content": [{"toolUse": {"toolUseId": f"c{i}", **use}}], "stopReason": "tool_use"}
        for i in range(cycles)
    ]
    responses.append({"content": [{"text": "done"}], "stopReason": "end_turn"})
    return write_script(path, responses)


async def record(client: Client, cycles: int, workdir: Path) -> WorkflowHistory:
    """The history of one closed session of ``cycles`` tool cycles."""
    model = script(workdir / "script.json", cycles)
    async with loop_session(client, workdir, model, f"replay-{cycles}") as loop:
        done = await loop.run(timeout_s=600)
        assert done.status == "completed", done.error
        await loop.keel.close(loop.session)
        await client.get_workflow_handle(loop.session).result()
    return await client.get_workflow_handle(loop.session).fetch_history()


def replayer(executor: ThreadPoolExecutor | None = None) -> Replayer:
    """Keel's replayer, as the runner's ``replay`` figure uses it."""
    return Replayer(
        workflows=[AgentSession],
        data_converter=DATA_CONVERTER,
        workflow_runner=sandbox_runner(),
        workflow_task_executor=executor,
    )


async def timed(history: WorkflowHistory, repeats: int) -> float:
    """Median seconds of ``repeats`` replays, after one warm-up."""
    plain = replayer()
    await plain.replay_workflow(history)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await plain.replay_workflow(history)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def profiled(history: WorkflowHistory) -> pstats.Stats:
    """One replay under cProfile, in the thread that runs the workflow's activations."""
    profiler = cProfile.Profile()
    with ThreadPoolExecutor(1, initializer=profiler.enable) as executor:
        await replayer(executor).replay_workflow(history)
        executor.submit(profiler.disable).result()
    return pstats.Stats(profiler)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="top N functions")
    parser.add_argument("--sort", default="tottime", help="pstats sort key")
    args = parser.parse_args()
    async with dev_server() as env:
        with tempfile.TemporaryDirectory() as tmp:
            history = await record(env.client, args.cycles, Path(tmp))
    size = sum(e.ByteSize() for e in history.events)
    print(f"history_events[cycles={args.cycles}] {len(history.events)} events")
    print(f"history_bytes[cycles={args.cycles}] {size} bytes")
    print(f"replay[cycles={args.cycles}] {await timed(history, args.repeats):.3f} s")
    if args.profile:
        (await profiled(history)).sort_stats(args.sort).print_stats(args.profile)


if __name__ == "__main__":
    asyncio.run(main())
