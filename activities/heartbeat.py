"""Keep an activity's heartbeat going while blocking work runs in a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")

HEARTBEAT_EVERY_S = 2.0


async def run_in_thread_with_heartbeat(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a thread, heartbeating until it returns.

    Heartbeats let Temporal notice a dead worker within the heartbeat timeout and deliver
    cancellation. When the activity is cancelled the thread cannot be stopped; its result is
    dropped.

    Args:
        fn: blocking work.

    Returns:
        What ``fn`` returned.
    """
    task = asyncio.ensure_future(asyncio.to_thread(fn))
    while True:
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_S)
        if done:
            return task.result()
        activity.heartbeat()
