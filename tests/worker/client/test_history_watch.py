"""Waiting clients long-poll history and query only when the session may have changed.

Temporal Cloud bills each query; reading history is free. Before, ``wait_turn`` queried every
50 to 500 ms and a follower every 0.2 s: 24 queries for a 5 s model call. The queries a
session's workflow answers are counted here by a worker interceptor.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from keel import KeelClient
from keel.worker.client import writing
from keel.worker.client.history_watch import query_delay
from keel.workflows.activity_options import MODEL_ACTIVITY, NOTIFY_ACTIVITY, TOOL_ACTIVITY
from keel.workflows.turn_waits import WAIT_TURN_UPDATE
from tests.helpers.counting import CountAsked, asked
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use


def _slow_cycles(tmp_path: Path, cycles: int, delay_s: float) -> list[dict[str, Any]]:
    out = tmp_path / "out.txt"
    steps = [
        respond(
            tool_use(f"r{i}", "record", path=str(out), value=f"v{i}"),
            stop="tool_use",
            delay_s=delay_s,
        )
        for i in range(cycles)
    ]
    return [*steps, respond(text("done"), delay_s=delay_s)]


async def test_wait_turn_asks_nothing_while_the_turns_work_runs(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three cycles of 1.2 s model calls (4.8 s): the polling wait_turn asked about 12 times,
    the lagging one once a step (7 with a 0.5 s lag); the history watch, the way a client
    waits when the session does not answer its ``wait_turn`` update, asks the turn (and
    whether one comes after it) once as it runs, and again at its end. With the update, no
    query at all (``tests/workflows/test_turn_waits.py``)."""
    monkeypatch.setattr(writing, "WAIT_LAG_S", 0.5)  # were it used, a query every step
    monkeypatch.setattr(writing, "WAIT_BY_UPDATE", False)
    config = script(_slow_cycles(tmp_path, 3, 1.2))
    session = f"watch-{uuid.uuid4().hex[:8]}"
    async with run_worker(interceptors=[CountAsked()]):
        record = await keel.run(session, "go", config=config, timeout_s=60)
    assert record.status == "completed", record
    assert (tmp_path / "out.txt").read_text().splitlines() == ["v0", "v1", "v2"]
    # the turn query, or the state query that also says whether a turn is queued behind it
    answered = asked(session)
    queries = answered["query turn"] + answered["query state"]
    assert 1 <= queries <= 3, f"wait_turn asked {queries} queries"


async def test_wait_turn_sees_its_turn_end_in_the_task_that_starts_the_next(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prompt queued behind the waited turn starts in the task that ends it: the history
    shows only more work, so wait_turn's history watch, told of the queued turn, looks
    WAIT_LAG_S later (the ``wait_turn`` update, the session's own answer, needs no lag)."""
    monkeypatch.setattr(writing, "WAIT_LAG_S", 1.0)
    monkeypatch.setattr(writing, "WAIT_BY_UPDATE", False)
    config = script([respond(text("first"), delay_s=1.5), respond(text("second"), delay_s=30)])
    session = f"queued-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        first = await keel.prompt(session, "one", config=config)
        second = await keel.prompt(session, "two")
        assert (first.turn_id, second.turn_id) == (1, 2)
        record = await keel.wait_turn(session, 1, timeout_s=25)
        assert record.status == "completed"
        # seen long before the next turn's 30 s call ends: not at the turn after's end
        assert (await keel.turn(session, 2)).status == "running"
        await keel.cancel(session)


async def test_a_follower_sees_every_event_with_a_query_per_slow_step(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Every event, in order, once; about one query per model call, not five a second."""
    config = script(_slow_cycles(tmp_path, 2, 1.5))
    session = f"follow-{uuid.uuid4().hex[:8]}"
    async with run_worker(interceptors=[CountAsked()]):
        ack = await keel.prompt(session, "go", config=config)
        seen = []
        settled = None
        async for state in keel.snapshots(
            session,
            stop=lambda s: any(t.status == "completed" for t in s.turns if t.turn_id == 1),
        ):
            seen.extend(state.events)
            settled = state
    assert settled is not None and ack.turn_id == 1
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    types = [e.type for e in seen]
    assert types.count("model_called") == 3 and types.count("tool_finished") == 2
    assert types[-1] == "turn_ended"
    queries = asked(session)["query state"]
    # 4.5 s of model calls: 22 queries at the old 0.2 s; one a call, and a few for the rest
    assert 2 <= queries <= 8, f"the follower asked the state query {queries} times"


def _event(kind: EventType.ValueType, activity: str = "") -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    if activity:
        event.activity_task_scheduled_event_attributes.activity_type.name = activity
    return event


def test_query_delay_reads_what_a_workflow_task_did() -> None:
    done = _event(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    model = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, MODEL_ACTIVITY)
    tool = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, TOOL_ACTIVITY)
    notify = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, NOTIFY_ACTIVITY)
    status = _event(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
    ended = _event(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    assert query_delay([ended], 1.0) is None  # its workflow task has not run yet
    assert query_delay([done], 1.0) == 0.0  # a task that started nothing: idle, or waiting
    assert query_delay([done, model], 1.0) == 1.0
    assert query_delay([done, tool, tool], 2.5) == 2.5
    assert query_delay([done, notify], 1.0) == 0.0  # not the turn's work
    assert query_delay([done, model, status], 1.0) == 0.0  # KeelStatus changed
    accepted = _event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    assert query_delay([done, accepted, model], 1.0) == 0.0  # a prompt (or decision) came
    waits = _event(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    waits.workflow_execution_update_accepted_event_attributes.accepted_request.input.name = (
        WAIT_TURN_UPDATE
    )
    assert query_delay([done, waits, model], 1.0) == 1.0  # a client waits: nothing changed
    assert query_delay([done, model], None) is None  # wait_turn: nothing while work runs
    assert query_delay([done], None) == 0.0
    for close in (
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    ):
        assert query_delay([ended, _event(close)], 1.0) == 0.0
