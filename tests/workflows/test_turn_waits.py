"""A client waits for a turn by the session's ``wait_turn`` update, not by asking it.

The session answers the update once the turn settled; Temporal holds the client's request
open until then. Attacked here: more waits than the session holds, a raw ``temporal`` CLI
wait, a run that continues as new under a waiting client.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from keel.workflows.turn_waits import MAX_WAITING, WAIT_TURN_UPDATE
from tests.helpers.counting import CountAsked, asked
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import run_histories, save_history, temporal_cli, wait_update_ids


def sid() -> str:
    return f"waits-{uuid.uuid4().hex[:8]}"


def _answers(history: WorkflowHistory) -> list[dict[str, Any]]:
    """The turn records the run's ``wait_turn`` updates answered with."""
    ids = wait_update_ids(history)
    out = []
    for e in history.events:
        done = e.workflow_execution_update_completed_event_attributes
        if done.meta.update_id in ids and done.outcome.HasField("success"):
            out.append(json.loads(done.outcome.success.payloads[0].data))
    return out


async def test_run_sees_its_turn_end_by_one_update_and_asks_no_query(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Two cycles of 1 s model calls: no query at all; one ``wait_turn`` update, answered
    with the completed turn."""
    out = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("r0", "record", path=str(out), value="v0"), stop="tool_use"),
            respond(text("done"), delay_s=1.0),
        ]
    )
    session = sid()
    async with run_worker(interceptors=[CountAsked()]):
        record = await keel.run(session, "go", config=config, timeout_s=60)
    assert record.status == "completed", record
    assert record.message is not None and record.message.content[0].text == "done"
    answered = asked(session)
    assert not [k for k in answered if k.startswith("query ")], answered
    assert answered[f"update {WAIT_TURN_UPDATE}"] >= 1, answered
    (history,) = await run_histories(keel.client, session)
    assert len(wait_update_ids(history)) == 1
    assert [a["status"] for a in _answers(history)] == ["completed"]
    await save_history(keel.client, session, "turn_wait_completed")


async def test_waits_past_the_limit_are_refused_and_wait_the_other_way(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    temporal_env: WorkflowEnvironment,
) -> None:
    """Six clients wait on one slow turn: the session holds four, refuses the rest (so that
    Temporal's limit of updates in flight leaves room for decisions), and those wait by the
    history instead; all six see the completed turn. A raw ``temporal`` CLI wait meanwhile is
    refused naming the limit, and writes nothing."""
    config = script([respond(text("slow"), delay_s=4.0)])
    session = sid()
    handle = keel.client.get_workflow_handle(session)
    # cached: six clients look at the turn at once first, and a worker without a cache
    # answers concurrent queries of one session one per query timeout (temporalio's core)
    async with run_worker(max_cached_workflows=10):
        ack = await keel.prompt(session, "go", config=config)
        waits = [
            asyncio.create_task(keel.wait_turn(session, ack.turn_id, timeout_s=60))
            for _ in range(MAX_WAITING + 2)
        ]
        for _ in range(100):
            if len(wait_update_ids(await handle.fetch_history())) >= MAX_WAITING:
                break
            await asyncio.sleep(0.05)
        sent = await temporal_cli(
            temporal_env, "workflow", "update", "execute", "-w", session,
            "--name", WAIT_TURN_UPDATE, "--input", json.dumps({"turn_id": ack.turn_id}),
        )  # fmt: skip
        records = await asyncio.gather(*waits)
        history = await handle.fetch_history()
    assert sent.returncode != 0, sent.stdout
    assert f"{MAX_WAITING} waits are waiting already" in sent.stderr, sent.stderr
    assert [r.status for r in records] == ["completed"] * (MAX_WAITING + 2)
    assert len(wait_update_ids(history)) == MAX_WAITING
    assert [a["status"] for a in _answers(history)] == ["completed"] * MAX_WAITING


async def test_a_wait_spans_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A turn of six tool cycles moves to new runs under a waiting client: each run answers
    the wait early, as the turn stands, so that it can continue as new; the client then waits
    the other way and sees the turn complete."""
    out = tmp_path / "out.txt"
    steps = [
        respond(tool_use(f"r{i}", "record", path=str(out), value=f"v{i}"), stop="tool_use")
        for i in range(6)
    ]
    config = script([*steps, respond(text("done"), delay_s=0.5)], continue_as_new_events=20)
    session = sid()
    async with run_worker():
        record = await keel.run(session, "go", config=config, timeout_s=60)
    assert record.status == "completed", record
    assert out.read_text().splitlines() == [f"v{i}" for i in range(6)]
    runs = await run_histories(keel.client, session)
    assert len(runs) > 1
    first = _answers(runs[0])
    assert [a["status"] for a in first] == ["running"], first  # answered as it stood
    await save_history(keel.client, session, "turn_wait_across_continue_as_new")


async def test_a_wait_through_interrupts_answers_once_the_turn_ended(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Without ``through_interrupts`` a wait answers when the turn waits for a person; with
    it, only once the person approved and the turn completed."""
    config = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "x"), value="v"),
                stop="tool_use",
            ),
            respond(text("done")),
        ]
    )
    session = sid()
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        assert waiting.status == "awaiting_human"
        through = asyncio.create_task(
            keel.wait_turn(session, waiting.turn_id, timeout_s=30, through_interrupts=True)
        )
        await asyncio.sleep(1.0)
        assert not through.done()
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        done = await through
    assert done.status == "completed", done.error
    (history,) = await run_histories(keel.client, session)
    assert [a["status"] for a in _answers(history)] == ["awaiting_human", "completed"]
    await save_history(keel.client, session, "turn_wait_through_approval")


async def test_a_wait_answers_when_its_turn_ends_though_the_next_one_starts(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    """A prompt queued behind the waited turn starts in the workflow task that ends it; the
    session answers the wait in that task, long before the next turn's 30 s call ends."""
    config = script([respond(text("first"), delay_s=1.5), respond(text("second"), delay_s=30)])
    session = sid()
    async with run_worker():
        first = await keel.prompt(session, "one", config=config)
        second = await keel.prompt(session, "two")
        record = await keel.wait_turn(session, first.turn_id, timeout_s=25)
        assert record.status == "completed"
        assert (await keel.turn(session, second.turn_id)).status == "running"
        await keel.cancel(session)
