"""A worker that is late to answer a query is asked again, not called missing.

Seen in a full run on 2 loaded cores: a query timed out while its worker polled ("no worker
... answers (last poll 0 s ago)"), and the reader gave up on a live worker. Here the worker
process is stopped (SIGSTOP) past the query's timeout and continued during the second ask.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, SessionConfig, open_store
from keel.worker.client.errors import NoWorker
from tests.helpers.cli import keel_env, worker_process
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script
from tests.worker.conftest import until_polled

QUERY_TIMEOUT_S = 3.0


async def test_a_stopped_worker_that_comes_back_answers_the_second_ask(
    client: Client, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"late-{uuid.uuid4().hex[:8]}"
    address = temporal_env.client.service_client.config.target_host
    store = str(tmp_path / "store")
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=queue, KEEL_STORE=store)
    worker = worker_process(env, SAMPLE_TOOLS)
    keel = KeelClient(client, queue, open_store(store), query_timeout_s=QUERY_TIMEOUT_S)
    try:
        until_polled(env, worker)
        model = write_script(tmp_path / "s.json", [respond(text("here"))])
        config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
        session = f"late-{uuid.uuid4().hex[:8]}"
        done = await keel.run(session, "hello", config=config, timeout_s=60)
        assert done.status == "completed", done

        os.kill(worker.pid, signal.SIGSTOP)
        back = asyncio.get_running_loop().call_later(
            QUERY_TIMEOUT_S + 1.0, os.kill, worker.pid, signal.SIGCONT
        )
        started = time.monotonic()
        state = await keel.state(session)
        took = time.monotonic() - started
        back.cancel()
        assert state.status == "idle" and len(state.messages) == 2, state.status
        assert took > QUERY_TIMEOUT_S, took  # the first ask timed out; the second answered

        # a worker that stays stopped is reported after the second ask
        os.kill(worker.pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            await keel.state(session)
        except NoWorker as err:
            assert "last poll" in str(err), err
        else:
            raise AssertionError("a stopped worker answered")
        assert time.monotonic() - started > 2 * QUERY_TIMEOUT_S
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        worker.kill()
        worker.wait(timeout=30)
