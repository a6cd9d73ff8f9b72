"""The Python API when no worker answers a session: NoWorker, or notices while it waits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from keel import KeelClient, NoWorker, SessionClosed, SessionConfig
from keel.worker.client import calls
from keel.worker.client.calls import no_worker
from keel.worker.client.errors import WorkerWait
from tests.helpers.scripts import respond, text


def sid() -> str:
    return f"w-{uuid.uuid4().hex[:10]}"


async def test_notices_come_after_a_pause_then_rarely(
    client: Client,
    task_queue: str,
    script: Callable[..., SessionConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(calls, "NOTICE_AFTER_S", 0.4)
    monkeypatch.setattr(calls, "NOTICE_EVERY_S", 1.0)
    heard: list[tuple[float, WorkerWait]] = []
    loop = asyncio.get_running_loop()
    keel = KeelClient(
        client,
        task_queue,
        wait_for_worker=True,
        on_waiting=lambda w: heard.append((loop.time(), w)),
    )
    session = sid()
    sent = loop.time()
    with pytest.raises(TimeoutError):  # no worker ever polls this task queue
        await asyncio.wait_for(keel.prompt(session, "hi", config=script([respond(text("x"))])), 2.9)
    offsets = [at - sent for at, _ in heard]
    assert len(heard) == 3, offsets  # at 0.4, 1.4 and 2.4 s
    gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
    assert 0.35 <= offsets[0] < 0.9 and all(0.7 < gap < 1.3 for gap in gaps), offsets
    wait = heard[-1][1]
    assert wait.session_id == session and wait.workers.task_queue == task_queue
    assert wait.workers.none and wait.waited_s >= 2.3
    assert str(wait).startswith(
        f"waiting for a worker on task queue {task_queue!r} (2 s so far; no worker is polling"
    )


async def test_a_query_without_worker_raises_no_worker(
    client: Client, task_queue: str, script: Callable[..., SessionConfig]
) -> None:
    waiting = KeelClient(client, task_queue, wait_for_worker=True)
    session = sid()
    with pytest.raises(TimeoutError):  # starts the session; nobody takes its first task
        await asyncio.wait_for(
            waiting.prompt(session, "hi", config=script([respond(text("x"))])), 1
        )
    keel = KeelClient(client, task_queue, query_timeout_s=1.5)
    with pytest.raises(NoWorker) as raised:
        await keel.state(session)
    assert raised.value.workers.none and raised.value.session_id == session
    assert f"no worker is polling task queue {task_queue!r}, so session {session!r}" in str(
        raised.value
    )
    with pytest.raises(NoWorker):
        await keel.check_worker(session)
    # waiting instead: the same query is asked again until a worker answers
    answered = asyncio.ensure_future(waiting.turn(session, 1))
    await asyncio.sleep(2)
    assert not answered.done()
    answered.cancel()


async def test_a_failing_workflow_task_is_not_a_missing_worker(
    client: Client,
    task_queue: str,
    run_worker: Callable[..., Any],
    keel: KeelClient,
    script: Callable[..., SessionConfig],
) -> None:
    refused = RPCError("Workflow Task in failed state", RPCStatusCode.FAILED_PRECONDITION, b"")
    timed_out = RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")
    assert isinstance(await no_worker(client, "s", task_queue, refused), NoWorker)  # none polls
    async with run_worker():
        session = sid()
        await keel.run(session, "hi", config=script([respond(text("x"))]), timeout_s=30)
        assert await no_worker(client, session, task_queue, refused) is None  # one polls: it is
        missing = await no_worker(client, session, task_queue, timed_out)  # the task that fails
        assert isinstance(missing, NoWorker) and missing.workers.last_poll_s is not None
        await keel.check_worker(session)  # a worker polls: no error
        await keel.close(session)
        for _ in range(100):
            try:
                await keel.check_open(session)
            except SessionClosed as err:
                assert "is closed (completed)" in str(err)
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the session did not close")
        with pytest.raises(SessionClosed):
            await keel.steer(session, "too late")
