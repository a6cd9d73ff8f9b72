"""Start ``Summarise`` and print its result."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

from temporalio.client import Client

from keel import KeelPlugin
from workflows import Summarise


async def main() -> None:
    """Run the workflow once; the topic is the first argument."""
    client = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"), plugins=[KeelPlugin()]
    )
    model = f"scripted:{Path('model.json').resolve()}"  # a scripted model: no credentials
    topic = sys.argv[1] if len(sys.argv) > 1 else "otters"
    result = await client.execute_workflow(
        Summarise.run,
        args=[model, topic],
        id=f"summarise-{uuid.uuid4().hex[:8]}",
        task_queue=os.environ.get("TASK_QUEUE", "samples-app"),
    )
    print(result)


if __name__ == "__main__":
    asyncio.run(main())
