"""A session cancelled from Temporal, or closed now by Keel, ends its turn and its interrupts.

``temporal workflow cancel`` is how an operator stops a workflow: the session catches the
cancellation, records its waiting turn and interrupts ``cancelled`` (so that replaying the
closed run, as a query does, tells the truth) and clears the UI's current details.
``KeelClient.close(now=True)`` (``keel close``) ends the running turn and drops the queued
ones, and the workflow completes.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus

from keel import KeelClient, SessionConfig
from keel.workflows.status_attribute import KEEL_STATUS
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history
from tests.workflows.test_current_details import details


async def ended_with(keel: KeelClient, session: str, status: WorkflowExecutionStatus) -> None:
    for _ in range(200):
        if (await keel.handle(session).describe()).status == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"session {session} never became {status.name}")


def approval_config(script: Script, target: Path) -> SessionConfig:
    """A session whose first turn waits for approval of a write to ``target``."""
    asked = tool_use("g1", "guarded_record", path=str(target), value="v")
    return script([respond(asked, stop="tool_use"), respond(text("never"))])


async def test_a_temporal_cancel_ends_the_waiting_turn_and_its_interrupt(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = approval_config(script, target)
    session = f"tcancel-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        ack = await keel.prompt(session, "write it", config=config)
        waiting = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        assert waiting.status == "awaiting_human"
        [interrupt] = waiting.interrupts
        await keel.prompt(session, "and then this")  # queued behind the waiting turn
        await keel.handle(session).cancel()
        await ended_with(keel, session, WorkflowExecutionStatus.CANCELED)
        state = await keel.state(session)
        pending = await keel.pending(session)
        shown = await details(keel, session)
        described = await keel.handle(session).describe()
    assert not target.exists()
    assert state.status == "cancelled"
    assert [(t.status, t.stop_reason) for t in state.turns] == [
        ("cancelled", "session_cancelled"),
        ("cancelled", "session_cancelled"),
    ]
    assert state.turns[0].error == "the session was cancelled in Temporal"
    # recorded by the session itself (a reader's overlay writes no events)
    decided = [e.detail for e in state.events if e.type == "interrupt_decided"]
    assert decided == [{"id": interrupt.id, "status": "cancelled", "by": None}]
    assert state.events[-1].type == "session_closed"
    assert pending.interrupts == [] and pending.turn_id is None
    assert shown == ""
    # what Temporal's list says: it no longer waits for a person (`KeelStatus="waiting"`)
    assert described.typed_search_attributes.get(KEEL_STATUS) == "idle"
    await save_history(keel.client, session, "temporal_cancelled")


async def test_a_temporal_cancel_stops_a_running_tool(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("s1", "slow", seconds=60, label="late"), stop="tool_use"),
            respond(text("never")),
        ]
    )
    session = f"tcancel-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        await keel.prompt(session, "hang", config=config)
        for _ in range(200):
            if (await keel.pending(session)).running:
                break
            await asyncio.sleep(0.05)
        await keel.handle(session).cancel()
        await ended_with(keel, session, WorkflowExecutionStatus.CANCELED)
        state = await keel.state(session)
    [turn] = state.turns
    assert (turn.status, turn.stop_reason) == ("cancelled", "session_cancelled")
    assert state.status == "cancelled"


async def test_close_now_cancels_the_running_turn_drops_the_queued_and_completes(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = approval_config(script, target)
    session = f"tclose-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        ack = await keel.prompt(session, "write it", config=config)
        await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        await keel.prompt(session, "queued")
        await keel.close(session, "done for today", now=True)
        await ended_with(keel, session, WorkflowExecutionStatus.COMPLETED)
        state = await keel.state(session)
    assert state.status == "closed"
    assert [(t.status, t.error) for t in state.turns] == [
        ("cancelled", "session closed: done for today"),
        ("cancelled", "session closed: done for today"),
    ]
    decided = [e.detail["status"] for e in state.events if e.type == "interrupt_decided"]
    assert decided == ["cancelled"]
    assert not target.exists()
