"""Keel's sandbox: temporalio's, with its code strings compiled once, restrictions intact."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer, Worker

from tests.conftest import HISTORIES
from tests.fakes.clock_workflow import ReadsTheClock
from tests.workflows.test_replay import RECORDED, _load
from worker.payloads import DATA_CONVERTER
from worker.sandbox import compiled, compiled_code_active, sandbox_runner
from workflows.session import AgentSession


def test_this_temporalio_has_the_instance_class_keel_extends() -> None:
    # Fails when a temporalio release moves the sandbox's private instance class: the worker
    # then falls back to the stock sandbox (slower, still correct), and this says so.
    assert compiled_code_active()


async def test_a_replay_runs_compiled_code_and_compiles_nothing_twice() -> None:
    path = next(p for p in RECORDED if p.parent == HISTORIES)
    replayer = Replayer(
        workflows=[AgentSession], data_converter=DATA_CONVERTER, workflow_runner=sandbox_runner()
    )
    compiled.cache_clear()
    await replayer.replay_workflow(_load(path))
    first = compiled.cache_info()
    await replayer.replay_workflow(_load(path))
    second = compiled.cache_info()
    # The sandbox entered the run many times (activations, payloads), from a few strings.
    assert 0 < first.misses <= 8
    assert first.hits > first.misses
    assert second.misses == first.misses, "a second replay compiled a string again"
    assert second.hits > first.hits


async def test_the_sandbox_still_refuses_the_wall_clock(client: Client, task_queue: str) -> None:
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ReadsTheClock],
        workflow_runner=sandbox_runner(),
    ):
        handle = await client.start_workflow(
            ReadsTheClock.run, id=f"clock-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert "datetime.datetime.now" in str(failed.value.cause)
