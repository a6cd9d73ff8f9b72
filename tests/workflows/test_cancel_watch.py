"""A running call learns of its cancel within about a second, however seldom it heartbeats.

Temporal tells an activity of its cancel only in a heartbeat's answer; a session with a long
heartbeat timeout (fewer heartbeats: fewer Temporal Cloud Actions) beats a model call every
10 s. ``keel.activities.heartbeats`` asks Temporal (describe, not an Action) every second
whether the cancel came, and beats at once when it did. Measured here on the history: from
``ActivityTaskCancelRequested`` to the worker's ``ActivityTaskCanceled``.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from keel import KeelClient
from keel.activities.heartbeats import CANCEL_CHECK_S
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use

# At this timeout a model call and a tool beat every 10 s: without the question, a cancel
# 2.5 s into the model call waits 7.5 s for its next beat, 1.5 s into the tool 8.5 s.
TIMEOUT_S = 30.0


def _at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime()


async def _events(keel: KeelClient, session: str) -> list[HistoryEvent]:
    history = await keel.client.get_workflow_handle(session).fetch_history()
    return list(history.events)


def _of(events: list[HistoryEvent], kind: EventType.ValueType) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == kind]


async def _cancel_latency(keel: KeelClient, session: str, nth: int, into_s: float) -> float:
    """Cancel the turn ``into_s`` into the session's ``nth`` activity; seconds until it ended."""
    for _ in range(400):
        events = await _events(keel, session)
        if len(_of(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)) >= nth:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"activity {nth} of {session} never started")
    await asyncio.sleep(into_s)
    await keel.cancel(session, "changed my mind")
    for _ in range(300):
        events = await _events(keel, session)
        asked = _of(events, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED)
        ended = _of(events, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED)
        if len(asked) == len(ended) == nth - 1:
            return (_at(ended[-1]) - _at(asked[-1])).total_seconds()
        await asyncio.sleep(0.05)
    raise AssertionError("the running activity never reported its cancel")


async def test_a_model_call_and_a_tool_that_beat_seldom_learn_of_a_cancel_at_once(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    session = f"cw-{uuid.uuid4().hex[:10]}"
    config = script(
        [  # a cancelled model call takes no answer: the next call gets the same one
            respond(tool_use("t1", "slow", seconds=60, label="too late"), stop="tool_use"),
            respond(text("too late"), delay_s=60),
        ],
        heartbeat_timeout_s=TIMEOUT_S,
    )
    async with run_worker():
        first = await keel.prompt(session, "a long tool", config=config)
        tool = await _cancel_latency(keel, session, 2, into_s=1.5)
        await keel.wait_turn(session, first.turn_id, timeout_s=30)
        second = await keel.prompt(session, "a long answer")
        model = await _cancel_latency(keel, session, 3, into_s=2.5)
        record = await keel.wait_turn(session, second.turn_id, timeout_s=30)

    assert record.status == "cancelled"
    # the next question (a second at most) and its beat's answer, 0.2-1 s here; the next
    # regular beat would be 7.5 s (model) and 8.5 s (tool) away: room for a loaded machine
    assert model < 4 * CANCEL_CHECK_S, model
    assert tool < 4 * CANCEL_CHECK_S, tool
