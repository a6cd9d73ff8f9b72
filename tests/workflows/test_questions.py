"""Tools that ask a human mid-run (ctx.interrupt), and session tool policies."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from keel import KeelClient, RequestRejected, TurnRecord
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import interrupt_as_shown, save_history
from tests.workflows.test_session import no_dangling, result_texts, update_events


def sid() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


async def waiting(keel: KeelClient, session: str, turn_id: int) -> TurnRecord:
    record = await keel.wait_turn(session, turn_id, timeout_s=30)
    assert record.status == "awaiting_human", record
    return record


async def test_a_tool_asks_once_and_uses_the_answer(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    config = script(
        [
            respond(tool_use("p1", "pick_account", query="rent", log=str(runs)), stop="tool_use"),
            respond(text("paid from savings")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "pay the rent", config=config)
        asked = await waiting(keel, session, ack.turn_id)
        [question] = asked.interrupts
        assert question.kind == "question" and question.name == "account"
        assert question.reason == "which account matches 'rent'?"
        assert question.tool_use.name == "pick_account" and question.tool_use.toolUseId == "p1"
        assert (await keel.state(session)).message_count == 1  # parked, not appended (S5)
        with pytest.raises(RequestRejected, match="is a question; use respond"):
            await keel.decide(session, question.id, "approve")
        answered = await keel.respond(session, question.id, "savings")
        assert answered.status == "answered"
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "question_answered")
    assert done.status == "completed"
    assert result_texts(state.messages[2]) == [("p1", "success", "using savings")]
    assert model_log()[1]["messages"][2]["content"][0]["toolResult"]["content"] == [
        {"text": "using savings"}
    ]
    # the tool ran twice (asked, then answered) with the same idempotency key
    assert runs.read_text().splitlines() == [f"run {session}/p1"] * 2
    no_dangling(state.messages)


async def test_two_tools_one_asking_only_the_asking_one_runs_again(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    free, runs = tmp_path / "free.txt", tmp_path / "runs.txt"
    config = script(
        [
            respond(
                tool_use("r1", "record", path=str(free), value="once"),
                tool_use("p1", "pick_account", query="food", log=str(runs)),
                stop="tool_use",
            ),
            respond(text("done")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "buy food", config=config)
        asked = await waiting(keel, session, ack.turn_id)
        await keel.respond(session, asked.interrupts[0].id, {"id": 7, "name": "checking"})
        await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert free.read_text() == "once\n", state.events  # the finished tool was not run again
    assert len(runs.read_text().splitlines()) == 2, (runs.read_text(), state.events)
    assert result_texts(state.messages[2]) == [
        ("r1", "success", "recorded once"),
        ("p1", "success", "using {'id': 7, 'name': 'checking'}"),
    ]


async def test_a_tool_asking_twice_in_sequence(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("c1", "confirm_twice", amount=50), stop="tool_use"),
            respond(text("confirmed")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "pay 50", config=config)
        first = (await waiting(keel, session, ack.turn_id)).interrupts[0]
        assert first.name == "confirm"
        await keel.respond(session, first.id, "yes")
        for _ in range(100):  # the tool runs again and asks its second question
            record = await keel.turn(session, ack.turn_id)
            if record.interrupts and record.interrupts[0].id != first.id:
                break
            await asyncio.sleep(0.05)
        second = record.interrupts[0]
        assert second.name == "really" and second.reason == "are you sure?"
        await keel.respond(session, second.id, True)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "question_twice")
    assert done.status == "completed"
    assert result_texts(state.messages[2]) == [("c1", "success", "confirmed yes then True")]


async def test_bad_responses_are_rejected(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("p1", "pick_account", query="x"), stop="tool_use"),
            respond(text("done")),
        ],
        approvers=["alice"],
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        question = (await waiting(keel, session, ack.turn_id)).interrupts[0]
        with pytest.raises(RequestRejected, match="unknown interrupt id 'nope'"):
            await keel.respond(session, "nope", "x", responder="alice")
        with pytest.raises(RequestRejected, match="'bob' is not an approver"):
            await keel.respond(session, question.id, "x", responder="bob")
        handle = keel.client.get_workflow_handle(session)
        for bad in (
            {"interrupt_id": question.id},  # no value
            {"interrupt_id": question.id, "value": "x", "tool_input": {"query": "y"}},
            "just a string",
        ):
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("respond", bad)
        await handle.signal("respond", {"interrupt_id": "nope", "value": 1})
        await asyncio.sleep(0.5)
        assert (await keel.turn(session, ack.turn_id)).status == "awaiting_human"
        await keel.respond(session, question.id, "main", responder="alice")
        with pytest.raises(RequestRejected, match="no longer pending: it was answered"):
            await keel.respond(session, question.id, "again", responder="alice")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        history = await handle.fetch_history()
    assert done.status == "completed"
    assert update_events(history) == ["ACCEPTED", "COMPLETED"] * 2  # the prompt and one answer


async def test_question_survives_a_worker_restart(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    config = script(
        [
            respond(tool_use("p1", "pick_account", query="x", log=str(runs)), stop="tool_use"),
            respond(text("done after restart")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        question = (await waiting(keel, session, ack.turn_id)).interrupts[0]
    async with run_worker():  # a new worker; the question waited in Temporal, not in memory
        await keel.respond(session, question.id, "savings")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed"
    assert result_texts(state.messages[2]) == [("p1", "success", "using savings")]


async def test_question_across_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("e0", "echo", text="warm up"), stop="tool_use"),
            respond(tool_use("e1", "echo", text="warm up more"), stop="tool_use"),
            respond(tool_use("p1", "pick_account", query="x"), stop="tool_use"),
            respond(text("done")),
        ],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        question = (await waiting(keel, session, ack.turn_id)).interrupts[0]
        for _ in range(100):
            if (await keel.state(session, include_messages=False)).run > 1:
                break
            await asyncio.sleep(0.1)
        await keel.respond(session, question.id, "carried")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert state.run > 1
    assert done.status == "completed"
    assert result_texts(state.messages[6]) == [("p1", "success", "using carried")]


async def test_an_answer_given_while_another_call_waits_survives_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A question answered while an approval of the same cycle still waits, in a full run.

    The session continues-as-new before the asking tool runs again; the answer must go with it
    (it used to be dropped: the tool ran without it and asked the same question again).
    """
    out, runs = tmp_path / "out.txt", tmp_path / "runs.txt"
    config = script(
        [
            respond(
                tool_use("a", "guarded_record", path=str(out), value="1"),
                tool_use("q", "pick_account", query="acme", log=str(runs)),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        for _ in range(200):
            pending = {i.kind: i for i in (await keel.pending(session)).interrupts}
            if len(pending) == 2:
                break
            await asyncio.sleep(0.05)
        await keel.respond(session, pending["question"].id, "savings")
        await asyncio.sleep(0.5)  # let the session act on the answer (and continue-as-new)
        assert [i.kind for i in (await keel.pending(session)).interrupts] == ["approval"]
        await keel.decide(session, pending["approval"].id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed", [(i.kind, i.name) for i in done.interrupts]
    assert state.run > 1
    assert ("q", "success", "using savings") in result_texts(state.messages[2])
    assert len(runs.read_text().splitlines()) == 2  # asked once, then ran with the answer


@pytest.mark.parametrize(
    ("amount", "to", "expect"),
    [
        (10, "bob", "runs"),
        (5000, "bob", "needs approval"),
        (10, "mallory", "denied"),
    ],
)
async def test_policy_hook_runs_denies_or_requires_approval(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    model_log: Any,
    amount: int,
    to: str,
    expect: str,
) -> None:
    config = script(
        [
            respond(tool_use("t1", "transfer", amount=amount, to=to), stop="tool_use"),
            respond(text("done")),
        ],
        policy="payments",
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "send money", config=config, timeout_s=30)
        if expect == "needs approval":
            assert record.status == "awaiting_human"
            [approval] = record.interrupts
            assert approval.kind == "approval"
            assert approval.reason == "transfers over 1000 need approval"
            await keel.decide(session, approval.id, "approve")
            record = await keel.wait_turn(session, record.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, f"policy_{expect.replace(' ', '_')}")
    assert record.status == "completed"
    [(use_id, status, body)] = result_texts(state.messages[2])
    if expect == "denied":
        assert status == "error" and "mallory is on the block list" in body
    else:
        assert (status, body) == ("success", f"sent {amount} to {to}")


async def test_unknown_policy_denies_with_a_clear_reason(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [respond(tool_use("t1", "echo", text="x"), stop="tool_use"), respond(text("ok"))],
        policy="no-such-policy",
    )
    session = sid()
    async with run_worker():
        await keel.run(session, "go", config=config, timeout_s=30)
        state = await keel.state(session)
    [(_, status, body)] = result_texts(state.messages[2])
    assert status == "error" and "tool policy 'no-such-policy' is not registered" in body


async def test_an_answer_sent_as_soon_as_the_question_shows_is_taken(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Every answer to a question the session shows is taken.

    The workflow task that opened the question used to have no command; replayed after a
    cache miss (every task here), its events joined the next task, whose respond update was
    validated before them: the id looked unknown, every time (1 run in 8 of this shape). The
    session now upserts a memo when it opens an interrupt (patch ``keel-interrupt-memo``).
    """
    async with run_worker():
        for i in range(15):
            runs = tmp_path / f"runs{i}.txt"
            config = script(
                [
                    respond(
                        tool_use("r1", "record", path=str(tmp_path / f"free{i}.txt"), value="x"),
                        tool_use("p1", "pick_account", query="food", log=str(runs)),
                        stop="tool_use",
                    ),
                    respond(text("done")),
                ]
            )
            session = sid()
            ack = await keel.prompt(session, "buy food", config=config)
            # by queries: a wait_turn update would give the task that opens the question a
            # command of its own (its answer), which hides the race
            await keel.respond(session, (await interrupt_as_shown(keel, session)).id, "checking")
            done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
            assert done.status == "completed", (i, done)
