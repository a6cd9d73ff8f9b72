"""Keel's sandbox: temporalio's, entered less expensively, with its restrictions intact."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer, Worker, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxRestrictions

import keel.worker.process.sandbox as sandbox
from keel import AgentSession, KeelClient
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.assembly import build_worker
from keel.worker.process.sandbox import (
    PASSTHROUGH_MODULES,
    CompiledSandboxRunner,
    compiled,
    compiled_code_active,
    sandbox_runner,
)
from tests.fakes.clock_workflow import ReadsTheClock
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import HISTORIES
from tests.workflows.test_replay import RECORDED, _load


def test_this_temporalio_has_the_instance_class_keel_extends() -> None:
    # Fails when a temporalio release moves the sandbox's private instance class: the worker
    # then falls back to the stock sandbox (slower, still correct), and this says so.
    assert compiled_code_active()


async def test_without_the_private_class_the_worker_uses_the_stock_sandbox(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # What a temporalio release that moves ``_runner._Instance`` gets: the stock sandbox, a
    # warning, and replays that still pass.
    monkeypatch.setattr(sandbox, "_Instance", None)
    assert not compiled_code_active()
    runner = sandbox_runner()
    assert "stock sandbox" in caplog.text
    path = next(p for p in RECORDED if p.parent == HISTORIES)
    replayer = Replayer(
        workflows=[AgentSession], data_converter=DATA_CONVERTER, workflow_runner=runner
    )
    compiled.cache_clear()
    await replayer.replay_workflow(_load(path))
    assert compiled.cache_info().hits == compiled.cache_info().misses == 0


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


class _CheckedInstance(sandbox._CompiledInstance):  # type: ignore[name-defined, misc]
    """Answers as Keel's sandbox does, and records the stock sandbox's answer beside it."""

    answers: list[tuple[Any, Any]] = []

    def get_serialization_context(self, command_info: Any) -> Any:
        ours = super().get_serialization_context(command_info)
        stock = super(sandbox._CompiledInstance, self).get_serialization_context(command_info)
        self.answers.append((ours, stock))
        return ours

    def get_external_store_context(self, command_info: Any) -> Any:
        ours = super().get_external_store_context(command_info)
        stock = super(sandbox._CompiledInstance, self).get_external_store_context(command_info)
        self.answers.append((ours, stock))
        return ours


class _CheckedRunner(CompiledSandboxRunner):
    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CheckedInstance(det, self.runner_class, self.restrictions)


async def test_payload_contexts_asked_outside_the_sandbox_are_the_sandboxed_answers(
    client: Client, task_queue: str, keel: KeelClient, script: Script
) -> None:
    runner = _CheckedRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )
    config = script(
        [
            respond(
                tool_use("t1", "echo", text="a"), tool_use("t2", "add", a=1, b=2), stop="tool_use"
            ),
            respond(text("done")),
        ]
    )
    _CheckedInstance.answers.clear()
    worker = build_worker(
        client,
        task_queue,
        [SAMPLE_TOOLS],
        store=keel.store,
        max_cached_workflows=0,
        workflow_runner=runner,
    )
    async with worker:
        record = await keel.run(f"ctx-{uuid.uuid4().hex[:8]}", "go", config=config, timeout_s=30)
    assert record.status == "completed"
    kinds = {type(ours).__name__ for ours, _ in _CheckedInstance.answers}
    # activity payloads (the model and tool calls) and the run's own (its input, updates)
    assert {"ActivitySerializationContext", "WorkflowSerializationContext"} <= kinds
    assert all(ours == stock for ours, stock in _CheckedInstance.answers)
