"""One benchmark worker in its own process, so its CPU time and memory can be read from /proc.

Usage::

    python -m tests.benchmarks.worker keel --address 127.0.0.1:7233 --task-queue q --store DIR
    python -m tests.benchmarks.worker floor --address 127.0.0.1:7233 --task-queue q

``keel`` is Keel's worker as ``keel worker`` makes it: ``keel.worker.process.assembly.build_worker``
(``AgentSession``, Keel's activities, the ``tests.sample_tools`` tools, Keel's sandbox and
data converter), then ``freeze_startup_heap``; ``floor`` is a plain temporalio ``Worker`` for
``tests.benchmarks.floor`` (``FloorLoop`` and ``FloorParked`` with their activities; default
data converter, default sandbox), heap left as it is.
``--freeze-heap yes|no`` overrides either default. Both keep temporalio's default
concurrency settings. The process prints ``ready`` once the worker polls, and shuts the
worker down on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

SAMPLE_TOOLS = "tests.sample_tools"


async def build(system: str, address: str, task_queue: str, store: str, **options: Any) -> Worker:
    """The worker of one system, connected to ``address``."""
    if system == "keel":
        from keel.activities.store import open_store
        from keel.worker.process.assembly import build_worker, connect

        client = await connect(address, "default")
        return build_worker(client, task_queue, [SAMPLE_TOOLS], store=open_store(store), **options)
    from tests.benchmarks.floor import FloorLoop, FloorParked, floor_model, floor_record, floor_tool

    client = await Client.connect(address, namespace="default")
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FloorLoop, FloorParked],
        activities=[floor_model, floor_tool, floor_record],
        **options,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system", choices=["keel", "floor"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--store", default=".keel/bench-store", help="Keel's conversation store")
    parser.add_argument("--max-cached-workflows", type=int, default=None)
    parser.add_argument(
        "--freeze-heap", choices=["yes", "no"], help="default: yes for keel, no for floor"
    )
    args = parser.parse_args()
    options: dict[str, Any] = {}
    if args.max_cached_workflows is not None:
        options["max_cached_workflows"] = args.max_cached_workflows
    worker = await build(args.system, args.address, args.task_queue, args.store, **options)
    if (args.freeze_heap or ("yes" if args.system == "keel" else "no")) == "yes":
        from keel.worker.process.assembly import freeze_startup_heap

        freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
    # Skip interpreter finalisation: the SDK's Rust threads may still call into Python.
    sys.stdout.flush()
    os._exit(0)
