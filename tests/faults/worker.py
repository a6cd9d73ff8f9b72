"""A Keel worker process for fault tests that can run only the workflows or only activities.

``keel worker`` runs both in one process. To stop a session exactly between a tool finishing
and the append (which happens in a workflow task), the fault harness runs the workflow side
and the activity side in separate processes and kills only the workflow one. Both are built
by ``keel.worker.process.assembly.build_worker``, so they carry the product's options, then split::

    python -m tests.faults.worker --role workflows|activities|both --tools MOD[,MOD]

Reads ``TEMPORAL_ADDRESS``, ``KEEL_TASK_QUEUE`` and ``KEEL_STORE`` like ``keel worker``.
SIGTERM shuts it down gracefully; the tests use SIGKILL. ``--gate FILE`` makes a standby worker:
started and built, it polls only once FILE exists (``python -m tests.faults --standby``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta
from pathlib import Path

from temporalio.worker import Worker

from keel import KeelPlugin, Settings, connect, open_store
from keel.worker.process.assembly import build_worker
from keel.worker.process.inflight import reclaiming
from keel.worker.settings import WorkerSettings


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=["workflows", "activities", "both"], default="both")
    parser.add_argument("--tools", default="")
    parser.add_argument(
        "--gate",
        type=Path,
        default=None,
        help="start, then write GATE.ready and poll only once the file GATE exists",
    )
    args = parser.parse_args()
    settings = Settings.from_env()
    assert settings.address, "TEMPORAL_ADDRESS must be set"
    client = await connect(settings.address, settings.namespace)
    modules = [m for m in args.tools.split(",") if m]
    # build the product's worker on a client of its own, only to read its options: a worker
    # registers with its client when created, and one client takes one worker per queue
    template = await connect(settings.address, settings.namespace)
    built = build_worker(template, settings.task_queue, modules, store=open_store(settings.store))
    # what the worker runs with once KeelPlugin configured it; without the plugin itself,
    # which would add the workflow and the activities back to each side
    config = built.config(active_config=True)
    config.pop("client", None)
    [plugin] = [p for p in config.pop("plugins", []) if isinstance(p, KeelPlugin)]
    # as serve.py does for ``keel worker``
    sticky = WorkerSettings.load().sticky_timeout_s
    config["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=sticky)
    if args.role == "workflows":
        config["activities"] = []
        config.pop("activity_executor", None)
    elif args.role == "activities":
        config["workflows"] = []
    worker = Worker(client, **config)  # type: ignore[misc]  # "client" was popped above
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if args.gate is not None:
        await _wait_at(args.gate, stop)
    if stop.is_set():
        return
    assert settings.state_home is not None
    # as KeelPlugin.run_worker does: what dead workers left running goes back first
    async with reclaiming(client, settings.state_home), plugin.serving(), worker:
        await stop.wait()


async def _wait_at(gate: Path, stop: asyncio.Event) -> None:
    """Say this worker is ready, then wait until ``gate`` exists (or a stop signal)."""
    gate.with_suffix(".ready").touch()
    while not gate.exists() and not stop.is_set():
        await asyncio.sleep(0.005)


if __name__ == "__main__":
    asyncio.run(main())
