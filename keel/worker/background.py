"""Tasks that run beside a block of code and stop with it, stopped for sure.

``stop_task`` cancels a task and waits for its end, cancelling again while it runs on;
``beside`` runs a coroutine in a task for the length of an ``async with`` block.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

# How long a cancelled task may take to end before it is cancelled again (``stop_task``).
CANCEL_AGAIN_S = 0.5


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again while it runs on.

    On Python 3.11, an ``asyncio.wait_for`` whose awaitable finishes as the cancel comes
    returns its result and drops the cancel: a text follower reading its stream's last line
    then went on following, and ``keel run`` (or the web page's stream) waited for it forever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_S)


@asynccontextmanager
async def beside(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``work`` in a task while the block runs; stop it (``stop_task``) when it ends."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        await stop_task(task)
