"""A Keel worker process with MCP servers, for tests that kill workers mid-call.

    python -m tests.mcp_servers.worker --mcp NAME=COMMAND [--mcp ...] [--tools MOD,...]

Reads ``TEMPORAL_ADDRESS``, ``KEEL_TASK_QUEUE`` and ``KEEL_STORE`` like ``keel worker``; the
servers are given to ``build_worker(..., mcp_servers=...)`` as the CLI will. Prints ``ready``
once it polls; SIGTERM stops it gracefully, the tests use SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from keel import Settings, connect, open_store
from keel.activities.mcp import parse_mcp_spec
from keel.worker.process.assembly import build_worker


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mcp", action="append", default=[])
    parser.add_argument("--tools", default="")
    args = parser.parse_args()
    settings = Settings.from_env()
    assert settings.address, "TEMPORAL_ADDRESS must be set"
    client = await connect(settings.address, settings.namespace)
    worker = build_worker(
        client,
        settings.task_queue,
        [m for m in args.tools.split(",") if m],
        store=open_store(settings.store),
        mcp_servers=[parse_mcp_spec(spec, settings.environ) for spec in args.mcp],
        settings=settings,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
