"""Your worker: a plain temporalio Worker; KeelPlugin adds AgentSession and Keel's activities."""

from __future__ import annotations

import asyncio
import os

from temporalio.client import Client
from temporalio.worker import Worker

from activities import shout
from keel import KeelPlugin
from workflows import Summarise


async def main() -> None:
    """Serve your workflow and activity, and Keel's, until interrupted."""
    client = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"), plugins=[KeelPlugin()]
    )
    task_queue = os.environ.get("TASK_QUEUE", "samples-app")
    worker = Worker(client, task_queue=task_queue, workflows=[Summarise], activities=[shout])
    print(f"worker on {task_queue}", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
