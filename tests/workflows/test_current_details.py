"""A session tells Temporal's UI what it does: its current details, read back as the UI does."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata

from keel import KeelClient, TurnRecord
from keel.workflows.current_details import current_details
from keel.workflows.ledger import Ledger
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use

# The built-in query behind the Temporal UI's "current details" (and `temporal workflow metadata`)
METADATA_QUERY = "__temporal_workflow_metadata"


async def details(keel: KeelClient, session: str) -> str:
    metadata = await keel.handle(session).query(METADATA_QUERY, result_type=WorkflowMetadata)
    assert isinstance(metadata, WorkflowMetadata)
    return metadata.current_details


async def eventually(keel: KeelClient, session: str, expected: str) -> str:
    seen = ""
    for _ in range(100):
        seen = await details(keel, session)
        if expected in seen:
            return seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"current details never said {expected!r}; last: {seen!r}")


async def test_details_say_what_the_session_waits_for(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    asked = tool_use("g1", "guarded_record", path=str(tmp_path / "out.txt"), value="v")
    config = script(
        [
            respond(text("slow thought"), asked, stop="tool_use", delay_s=1.5),
            respond(text("done")),
        ]
    )
    session = f"details-{uuid.uuid4().hex[:8]}"
    async with run_worker():  # no workflow cache: every query replays the history first
        ack = await keel.prompt(session, "go", config=config)
        assert await eventually(keel, session, "model call 1 of turn 1")
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        [interrupt] = record.interrupts
        shown = await eventually(keel, session, "waiting for approval")
        assert shown == f"waiting for approval: guarded_record, interrupt {interrupt.id}"
        await keel.decide(session, interrupt.id, "approve", approver="ops")
        await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        assert await eventually(keel, session, "idle") == "idle: waiting for a prompt"


def test_details_name_questions_tools_and_sub_agents() -> None:
    ledger = Ledger()
    assert current_details(ledger, model_call=None, tools=[], children=[]) == (
        "idle: waiting for a prompt"
    )
    ledger = Ledger(turns={2: TurnRecord(turn_id=2, status="running")}, current_turn=2)
    shown = current_details(ledger, model_call=None, tools=["b", "a", "a"], children=["helper"])
    assert shown == "running tools of turn 2: a, b\nwaiting for sub-agents: helper"
    ledger.closed = True
    assert current_details(ledger, model_call=2, tools=[], children=[]) == "closed"
