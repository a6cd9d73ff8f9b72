"""A session started by the raw ``temporal`` CLI, as an operator without Keel's client does."""

from __future__ import annotations

import json
import uuid

from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text
from tests.helpers.temporal import temporal_cli


async def test_a_raw_start_may_give_its_prompt_as_a_string(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    task_queue: str,
    temporal_env: WorkflowEnvironment,
) -> None:
    """``--input '{"config": ..., "prompt": "text"}'``: the text is the first turn's prompt.

    A string where content blocks are expected failed the first workflow task, retried
    forever with a traceback in the worker's log each time (issue 42).
    """
    config = script([respond(text("hello to you"))])
    session = f"raw-{uuid.uuid4().hex[:8]}"
    start = {"config": config.model_dump(mode="json"), "prompt": "hello from the shell"}
    async with run_worker():
        started = await temporal_cli(
            temporal_env,
            "workflow", "start", "--type", "AgentSession", "--task-queue", task_queue,
            "--workflow-id", session, "--input", json.dumps(start),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        record = await keel.wait_turn(session, 1, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "completed", record
    assert state.messages[0].content[0].text == "hello from the shell"
    assert record.message is not None and record.message.content[0].text == "hello to you"
