"""A session Temporal ended before any worker ran it reads as its start input, ended.

Temporal refuses every query of a run closed before its first workflow task started
(``FAILED_PRECONDITION``), worker or not. Seen under load in CI: a 4 s run timeout passed
before a busy worker took the task, and ``keel show`` failed with Temporal's words. Here a
start delay keeps the task from any worker, and the run is terminated first.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta

from temporalio.client import Client

from keel import KeelClient, SessionConfig
from keel.workflows.contracts import TurnRecord
from keel.workflows.ledger import Ledger, SessionInput
from keel.workflows.messages import Message, TokenUsage, text_block
from keel.workflows.session import AgentSession
from tests.helpers.scripts import respond, text


async def never_ran(client: Client, task_queue: str, start: SessionInput) -> str:
    """Start a session that no worker can take for an hour, and terminate it."""
    session = f"nr-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        AgentSession.run,
        start,
        id=session,
        task_queue=task_queue,
        start_delay=timedelta(hours=1),
    )
    await handle.terminate(reason="not today")
    return session


async def test_a_continued_session_reads_as_its_carried_ledger(
    client: Client, task_queue: str, script: Callable[..., SessionConfig]
) -> None:
    conversation = [
        Message(role="user", content=[text_block("first")]),
        Message(role="assistant", content=[text_block("answer")]),
    ]
    carried = Ledger(
        run=3,
        messages=conversation,
        turns={
            1: TurnRecord(turn_id=1, status="completed", cycles=1),
            2: TurnRecord(turn_id=2, status="running"),
        },
        usage=TokenUsage(inputTokens=7, outputTokens=3, totalTokens=10),
    )
    config = script([respond(text("never asked"))])
    session = await never_ran(client, task_queue, SessionInput(config=config, carried=carried))
    keel = KeelClient(client, task_queue, query_timeout_s=5)

    state = await keel.state(session)
    assert (state.status, state.run, state.messages) == ("terminated", 3, conversation)
    assert state.config.model == config.model and state.usage.totalTokens == 10
    assert [(t.turn_id, t.status, t.stop_reason) for t in state.turns] == [
        (1, "completed", None),
        (2, "cancelled", "session_terminated"),
    ]
    assert (
        await keel.turn(session, 2)
    ).error == "the session was terminated in Temporal: not today"
    assert (await keel.turn(session, 9)).status == "cancelled"
    assert (await keel.pending(session)).interrupts == []
    assert await keel.effects(session) == []
    followed = [s async for s in keel.snapshots(session)]
    assert [s.status for s in followed] == ["terminated"]
    without = await keel.state(session, include_messages=False)
    assert without.messages == [] and without.message_count == 2


async def test_a_new_session_reads_as_its_prompt_never_run(
    client: Client, task_queue: str, script: Callable[..., SessionConfig]
) -> None:
    start = SessionInput(config=script([respond(text("x"))]), prompt=[text_block("go")])
    session = await never_ran(client, task_queue, start)
    # a client that waits for a worker does not wait for one that can never answer
    waiting = KeelClient(client, task_queue, wait_for_worker=True)
    turn = await asyncio.wait_for(waiting.turn(session, 1), 10)
    assert (turn.status, turn.stop_reason) == ("cancelled", "session_terminated")
    state = await waiting.state(session)
    assert (state.status, state.messages, state.message_count) == ("terminated", [], 0)
    assert await waiting.client_calls(session) == []  # nothing waits for a client
