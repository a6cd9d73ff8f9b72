"""Human approval (S4) and steering, attacked on a real dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from keel import KeelClient, RequestRejected, SessionNotFound, TurnRecord
from keel.workflows.messages import tool_uses
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import interrupt_as_shown, save_history
from tests.workflows.test_session import no_dangling, result_texts, update_events


def sid() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


async def interrupted(
    keel: KeelClient, session: str, config: Any, prompt: str = "go"
) -> TurnRecord:
    record = await keel.run(session, prompt, config=config, timeout_s=30)
    assert record.status == "awaiting_human", record
    return record


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_approve_runs_the_tool_the_model_asked_for(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    asked = tool_use("g1", "guarded_record", path=str(target), value="approved-once")
    config = script([respond(text("needs a human"), asked, stop="tool_use"), respond(text("done"))])
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        [interrupt] = waiting.interrupts
        # what the approver is shown is exactly what the model produced
        assert interrupt.kind == "approval" and interrupt.name == "guarded_record"
        assert interrupt.tool_use.model_dump() == asked["toolUse"]
        assert lines(target) == []
        state = await keel.state(session)
        assert [m.role for m in state.messages] == ["user"]  # parked, not appended (S5)
        ack = await keel.decide(session, interrupt.id, "approve", approver="ops")
        assert ack.status == "approved" and ack.turn_id == waiting.turn_id
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "approval_approved")
    assert done.status == "completed" and done.interrupts == []
    assert lines(target) == ["approved-once"]
    assert result_texts(state.messages[2]) == [("g1", "success", "recorded approved-once")]
    kinds = [e.type for e in state.events]
    assert kinds.index("interrupt_created") < kinds.index("interrupt_decided")
    assert kinds.index("interrupt_decided") < kinds.index("tool_started")
    no_dangling(state.messages)


async def test_deny_gives_the_model_the_reason(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="x"), stop="tool_use"),
            respond(text("understood, I will not")),
        ]
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        await keel.decide(session, waiting.interrupts[0].id, "deny", reason="not on a Friday")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
    await save_history(keel.client, session, "approval_denied")
    assert done.status == "completed"
    assert not target.exists()
    seen = model_log()[1]["messages"][2]["content"][0]["toolResult"]
    assert seen["toolUseId"] == "g1" and seen["status"] == "error"
    assert (
        "denied" in seen["content"][0]["text"] and "not on a Friday" in seen["content"][0]["text"]
    )


async def test_mixed_message_runs_the_free_tool_at_once_and_appends_together(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(
                tool_use("free", "record", path=str(target), value="free"),
                tool_use("held", "guarded_record", path=str(target), value="held"),
                stop="tool_use",
            ),
            respond(text("both done")),
        ]
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        for _ in range(100):  # the free tool finishes while the other waits for a human
            # its line is written before its activity ends and the session records that
            pending = await keel.pending(session)
            if lines(target) == ["free"] and [u.toolUseId for u in pending.running] == ["held"]:
                break
            await asyncio.sleep(0.05)
        assert lines(target) == ["free"]
        assert [u.toolUseId for u in pending.running] == ["held"]
        assert pending.message is not None and len(tool_uses(pending.message)) == 2
        assert (await keel.state(session)).message_count == 1  # the deferred append waits
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert lines(target) == ["free", "held"]
    assert [r[0] for r in result_texts(state.messages[2])] == ["free", "held"]
    no_dangling(state.messages)


async def test_bad_decisions_are_rejected_and_nothing_runs(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(text("idle")),
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ],
        approvers=["alice"],
    )
    session = sid()
    async with run_worker():
        await keel.run(session, "hello", config=config, timeout_s=30)
        with pytest.raises(RequestRejected, match="nothing is pending"):
            await keel.decide(session, "made-up", "approve", approver="alice")
        waiting = await keel.run(session, "now act", timeout_s=30)
        real_id = waiting.interrupts[0].id
        with pytest.raises(RequestRejected, match="unknown interrupt id 'made-up'") as unknown:
            await keel.decide(session, "made-up", "approve", approver="alice")
        assert unknown.value.kind == "UnknownInterrupt"  # typed: what KeelClient retries on
        with pytest.raises(RequestRejected, match="'mallory' is not an approver") as refused:
            await keel.decide(session, real_id, "approve", approver="mallory")
        assert refused.value.kind == "InputRejected"
        with pytest.raises(RequestRejected, match="names none"):
            await keel.decide(session, real_id, "approve")
        handle = keel.client.get_workflow_handle(session)
        forged = {
            "interrupt_id": real_id,
            "decision": "approve",
            "approver": "alice",
            "input": {"path": str(target), "value": "forged"},
        }
        malformed = [
            (forged, "input"),  # a decision cannot carry a tool input
            ({"interrupt_id": real_id, "decision": "maybe"}, "decision"),
            ({"interrupt_id": real_id}, "decision"),
        ]
        for bad, field in malformed:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await handle.execute_update("decide", bad)
            assert f"update decide: {field}" in str(caught.value.cause)
        assert not target.exists()
        assert (await keel.turn(session, waiting.turn_id)).status == "awaiting_human"
        await keel.decide(session, real_id, "deny", reason="no", approver="alice")
        with pytest.raises(RequestRejected, match="no longer pending: it was denied"):
            await keel.decide(session, real_id, "approve", approver="alice")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        history = await handle.fetch_history()
    assert done.status == "completed"
    assert not target.exists()
    # two prompts and one decision were written; none of the rejected ones were
    assert update_events(history) == ["ACCEPTED", "COMPLETED"] * 3


async def test_invalid_decide_signal_is_ignored(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ]
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        handle = keel.client.get_workflow_handle(session)
        await handle.signal("decide", {"interrupt_id": "bogus", "decision": "approve"})
        await handle.signal(
            "decide",
            {
                "interrupt_id": waiting.interrupts[0].id,
                "decision": "approve",
                "input": {"path": str(target), "value": "forged"},
            },
        )
        await handle.signal("decide", "approve everything")
        await asyncio.sleep(1.0)
        still = await keel.turn(session, waiting.turn_id)
        assert still.status == "awaiting_human" and not target.exists()
        await handle.signal(
            "decide", {"interrupt_id": waiting.interrupts[0].id, "decision": "approve"}
        )
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
    await save_history(keel.client, session, "approval_by_signal")
    assert done.status == "completed"
    assert lines(target) == ["v"]


async def test_approval_timeout_denies(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("nobody answered")),
        ],
        approval_timeout_s=1.0,
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30, through_interrupts=True)
        with pytest.raises(RequestRejected, match="no longer pending: it was timed_out"):
            await keel.decide(session, waiting.interrupts[0].id, "approve")
    await save_history(keel.client, session, "approval_timeout")
    assert done.status == "completed" and not target.exists()
    seen = model_log()[1]["messages"][2]["content"][0]["toolResult"]
    assert seen["status"] == "error" and "not approved in time" in seen["content"][0]["text"]


async def test_session_policy_requires_approval_for_a_plain_tool(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("r1", "record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ],
        approval_tools=["record"],
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        assert waiting.interrupts[0].name == "record" and not target.exists()
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
    assert lines(target) == ["v"]


async def test_approval_survives_a_worker_restart(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done after restart")),
        ]
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
    # no worker now: the session waits durably in Temporal, not in a process
    async with run_worker():
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert done.message is not None and done.message.content[0].text == "done after restart"
    assert lines(target) == ["v"]


async def test_cancel_while_waiting_for_approval(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use")]
    )
    session = sid()
    async with run_worker():
        waiting = await interrupted(keel, session, config)
        await keel.cancel(session, "never mind")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
        with pytest.raises(RequestRejected, match="no longer pending: it was cancelled"):
            await keel.decide(session, waiting.interrupts[0].id, "approve")
    assert done.status == "cancelled" and not target.exists()
    assert result_texts(state.messages[2])[0][1] == "error"
    no_dangling(state.messages)


async def test_steering_reaches_the_next_model_call(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(tool_use("s1", "slow", seconds=1.5, label="measured"), stop="tool_use"),
            respond(text("in metres, as you asked")),
        ]
    )
    session = sid()
    async with run_worker():
        with pytest.raises(SessionNotFound):
            await keel.steer(session, "too early")
        ack = await keel.prompt(session, "measure it", config=config)
        with pytest.raises(RequestRejected, match="no turn is running|empty"):
            await keel.steer(session, "   ")
        for _ in range(100):
            if (await keel.pending(session)).running:
                break
            await asyncio.sleep(0.05)
        steered = await keel.steer(session, "use metric units")
        assert steered.turn_id == ack.turn_id
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "steering")
    assert done.status == "completed"
    second = model_log()[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    last = second[-1]["content"]
    assert last[0]["toolResult"]["toolUseId"] == "s1"
    assert last[1]["text"].endswith("use metric units")
    no_dangling(state.messages)


async def test_steering_during_the_last_model_call_is_not_lost(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [respond(text("first answer"), delay_s=1.5), respond(text("answer after guidance"))]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "question", config=config)
        await keel.steer(session, "also mention the weather")  # while the model thinks
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed" and done.cycles == 2
    assert done.message is not None
    assert done.message.content[0].text == "answer after guidance"
    last_request = model_log()[-1]["messages"]
    assert [m["role"] for m in last_request] == ["user", "assistant", "user"]
    assert last_request[-1]["content"][0]["text"].endswith("also mention the weather")
    assert any(e.type == "steering_added" for e in state.events)


async def test_a_decision_sent_as_soon_as_the_approval_shows_is_taken(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A decision sent the moment the approval shows is taken, every time.

    Two races lie here. A workflow task that only opened interrupts completed with no command;
    replayed after a cache miss (every task here: the test workers cache nothing), its events
    joined the next task, whose decide update was validated before them, every time. The
    session now upserts a memo when it opens an interrupt (patch ``keel-interrupt-memo``).
    And a query can show the interrupt before the task that opens it has run (it replays the
    model call's result, which that task has not processed yet): a decision sent at once
    joins that task and is validated before the result. ``KeelClient`` sends it again.
    """
    await approve_as_soon_as_shown(keel, run_worker, script, tmp_path, keel.decide)


async def test_a_decide_signal_sent_as_soon_as_the_approval_shows_is_taken(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """The signal form of the race above has no answer to retry on: the session holds it.

    A signal handled in the workflow task that then opens its interrupt is applied when the
    interrupt opens (patch ``keel-held-signals``); a signal for an id that does not open in
    that task is still ignored (``test_hostile_input``: ``decide-signal-unknown-id``).
    """
    from keel.workflows.contracts import Decision

    async def signal(session: str, interrupt_id: str, decision: Any) -> None:
        update = Decision(interrupt_id=interrupt_id, decision=decision)
        await keel.client.get_workflow_handle(session).signal("decide", update)

    # 80 turns: the race hits about 1 turn in 20, so a build without the hold fails here
    await approve_as_soon_as_shown(keel, run_worker, script, tmp_path, signal, turns=80)


async def approve_as_soon_as_shown(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    send: Any,
    turns: int = 40,
    lanes: int = 4,
) -> None:
    """Turns that each park one approval, approved with ``send`` the moment it shows.

    ``lanes`` sessions at a time, each turn its own session: the race is within one
    session's tasks, and the worker replays every task (it caches nothing) as before.
    """

    async def turn(i: int) -> None:
        target = tmp_path / f"out{i}.txt"
        config = script(
            [
                respond(
                    tool_use("g1", "guarded_record", path=str(target), value="v"),
                    stop="tool_use",
                ),
                respond(text("done")),
            ]
        )
        session = sid()
        ack = await keel.prompt(session, "go", config=config)
        await send(session, (await interrupt_as_shown(keel, session)).id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=15)
        assert done.status == "completed", (i, done)
        assert lines(target) == ["v"]

    async def lane(first: int) -> None:
        for i in range(first, turns, lanes):
            await turn(i)

    async with run_worker():
        await asyncio.gather(*(lane(k) for k in range(lanes)))


async def test_only_an_interrupt_not_there_yet_is_asked_again() -> None:
    from keel.worker.client.calls import settling

    async def _settling(send: Any) -> str:
        return await settling(send, "UnknownInterrupt")

    calls: list[str] = []

    def rejecting(kind: str, times: int) -> Any:
        async def send() -> str:
            calls.append(kind)
            if len(calls) <= times:
                raise RequestRejected(f"refused ({kind})", kind=kind)
            return "taken"

        return send

    assert await _settling(rejecting("UnknownInterrupt", 2)) == "taken"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(RequestRejected, match="InputRejected"):
        await _settling(rejecting("InputRejected", 1))
    assert len(calls) == 1  # any other rejection is final at once
    calls.clear()
    with pytest.raises(RequestRejected, match="UnknownInterrupt"):
        await _settling(rejecting("UnknownInterrupt", 99))
    assert len(calls) == 7  # a truly unknown id is refused after about 3 s
