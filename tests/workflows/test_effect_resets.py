"""``temporal workflow reset`` and effects: what docs/temporal-surface.md says a reset does.

The tests reset through the service call the ``temporal workflow reset`` command makes, to
the workflow task that scheduled the tool: a finished ``write`` call answers from the
effects journal; an open ``outcome_unknown`` opens again under a new id, and the tool still
does not run unasked.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import WorkflowUpdateFailedError

from keel import ConversationStore, Decision, KeelClient
from keel.workflows.activity_options import TOOL_ACTIVITY
from tests.fault_tools import read_effects, read_runs
from tests.helpers.fixture_types import RunWorker, Script
from tests.workflows.test_effects import crashed, decide, refund_script, sid, unknown_outcome


async def reset_to_the_tool(keel: KeelClient, session: str, reason: str) -> str:
    """Reset the session to the workflow task that scheduled its first tool; the new run id."""
    handle = keel.client.get_workflow_handle(session)
    events = [e async for e in handle.fetch_history_events()]
    scheduled = next(
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == TOOL_ACTIVITY
    )
    task = next(
        e
        for e in reversed(events[:scheduled])
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    reset = await keel.client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=keel.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=session),
            reason=reason,
            workflow_task_finish_event_id=task.event_id,
            request_id=str(uuid.uuid4()),
        )
    )
    return reset.run_id


async def test_a_reset_past_a_finished_write_call_does_not_run_it_again(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """``temporal workflow reset`` to the task that scheduled the tool: the journal answers."""
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=refund_script(script, "refund", tmp_path))
        assert (await keel.wait_turn(session, ack.turn_id, timeout_s=30)).status == "completed"
        run_id = await reset_to_the_tool(keel, session, "test: reset past a finished write call")
        after = keel.client.get_workflow_handle(session, run_id=run_id)
        for _ in range(300):
            effects = await after.query("effects")
            if effects["effects"] and effects["effects"][0]["outcome"] == "recorded":
                break
            await asyncio.sleep(0.1)
    assert read_effects(tmp_path) == ["refund 20"]  # once, before the reset; not again
    assert [r[0] for r in read_runs(tmp_path)] == ["start", "effect", "done"]
    assert effects["effects"][0]["outcome"] == "recorded", effects


async def test_a_reset_opens_an_unknown_outcome_again_under_a_new_id(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    """A reset past an open interrupt opens it again with a new id; a decision naming the old
    id is refused, naming the new one; the write tool has still not run."""
    session = sid()
    crashed(store, session, "r1")
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=refund_script(script, "refund", tmp_path))
        before = await unknown_outcome(keel, session, ack.turn_id)
        await reset_to_the_tool(keel, session, "test: reset past an open outcome_unknown")
        after = None
        for _ in range(300):
            pending = (await keel.pending(session)).interrupts
            if pending and pending[0].id != before.id:
                after = pending[0]
                break
            await asyncio.sleep(0.1)
        assert after is not None and after.kind == "outcome_unknown", pending
        stale = Decision(interrupt_id=before.id, decision="resolve", result="x")
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await decide(keel, session, stale)
        said = str(caught.value.cause)
        assert "unknown interrupt id" in said and after.id in said, said
        fresh = Decision(interrupt_id=after.id, decision="resolve", result="made")
        await decide(keel, session, fresh)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed", done
    assert read_runs(tmp_path) == []  # the reset did not run the write tool blindly
