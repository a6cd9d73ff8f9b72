"""Long-running sessions: linear history, the conversation store, continue-as-new anywhere."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel import (
    AgentSession,
    ConversationStore,
    Decision,
    KeelClient,
    Message,
    RequestRejected,
    open_store,
    text_block,
)
from keel.activities.store.base import canonical_json
from keel.worker.process.assembly import build_worker
from keel.workflows.contracts import CancelInput, PromptInput, SteerInput
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import run_histories, save_history
from tests.workflows.test_approvals import lines
from tests.workflows.test_session import no_dangling, result_texts


def sid() -> str:
    return f"l-{uuid.uuid4().hex[:10]}"


async def history_bytes(client: Client, session: str) -> tuple[int, int]:
    """Protobuf bytes of every event of every run of a session, and the number of runs."""
    runs = await run_histories(client, session)
    return sum(e.ByteSize() for h in runs for e in h.events), len(runs)


def conversation_bytes(messages: list[Message]) -> int:
    return sum(len(canonical_json(m.model_dump(mode="json"))) for m in messages)


def tool_loop(cycles: int, result_size: int = 2048) -> list[dict[str, Any]]:
    loop = [
        respond(tool_use(f"c{i}", "big", size=result_size), stop="tool_use") for i in range(cycles)
    ]
    return [*loop, respond(text(f"done after {cycles} cycles"))]


async def run_loop(
    keel: KeelClient, run_worker: RunWorker, script: Script, cycles: int
) -> dict[str, Any]:
    config = script(tool_loop(cycles), continue_as_new_events=400, max_cycles_per_turn=None)
    session = sid()
    async with run_worker(max_cached_workflows=100):
        record = await keel.run(session, "loop", config=config, timeout_s=600)
        state = await keel.state(session)
    assert record.status == "completed", record.error
    assert record.cycles == cycles + 1
    messages = state.messages
    assert len(messages) == 2 * cycles + 2
    # every message exactly once, in order: each cycle's use and its result
    for i in range(cycles):
        use = messages[1 + 2 * i].content[0].toolUse
        assert use is not None and use.toolUseId == f"c{i}"
        assert result_texts(messages[2 + 2 * i])[0][:2] == (f"c{i}", "success")
    no_dangling(messages)
    total, runs = await history_bytes(keel.client, session)
    ratio = total / conversation_bytes(messages)
    return {"cycles": cycles, "runs": runs, "history": total, "ratio": ratio}


async def test_long_tool_loop_keeps_history_linear(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    figures = [await run_loop(keel, run_worker, script, n) for n in (50, 200)]
    for f in figures:
        print(
            f"history_ratio cycles={f['cycles']} runs={f['runs']} "
            f"history_bytes={f['history']} ratio={f['ratio']:.2f}"
        )
        # 1.49 and 1.58 here (1.55 and 1.53 at 100 and 300 cycles; 2.62 and 2.60 while tool
        # results still entered history); each run of 400 events also writes the carried
        # ledger twice (continue-as-new, start)
        assert f["ratio"] < 1.8, f
    assert figures[1]["runs"] > 1, "200 cycles should span several runs"


async def test_a_tool_result_stays_out_of_history_and_is_read_from_the_store(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    # a cycle budget of one ends the turn right after the tool: its result is not stored
    # as part of the conversation yet, only by the tool activity
    config = script(tool_loop(1, result_size=3000), max_cycles_per_turn=1, on_budget="fail")
    session = sid()
    async with run_worker():
        record = await keel.run(session, "loop", config=config, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "tool_result_by_reference")
    assert record.status == "failed" and record.stop_reason == "max_cycles"
    assert result_texts(state.messages[2]) == [("c0", "success", "x" * 3000)]
    runs = await run_histories(keel.client, session)
    assert not [e.event_id for h in runs for e in h.events if b"x" * 3000 in e.SerializeToString()]


async def test_continue_as_new_while_approval_pending(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("e1", "echo", text="warm up"), stop="tool_use"),
            respond(
                tool_use("free", "echo", text="runs at once"),
                tool_use("g1", "guarded_record", path=str(target), value="v"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        assert waiting.status == "awaiting_human"
        for _ in range(100):  # the parked session moves to a new run while it waits
            if (await keel.state(session, include_messages=False)).run > 1:
                break
            await asyncio.sleep(0.1)
        parked = await keel.state(session)
        assert parked.run > 1 and parked.pending.message is not None
        assert parked.message_count == 3  # the parked message is not in the conversation
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "approval_across_continue_as_new")
    assert done.status == "completed"
    assert target.read_text() == "v\n"
    assert result_texts(state.messages[4]) == [
        ("free", "success", "runs at once"),
        ("g1", "success", "recorded v"),
    ]
    assert [e.seq for e in state.events] == sorted(e.seq for e in state.events)
    assert any(e.type == "run_continued" for e in state.events)
    no_dangling(state.messages)
    # The model saw the whole tool specs in both runs, though history keeps only their terms.
    requests = model_log()
    assert len(requests) == 3
    assert requests[2]["tools"] == requests[0]["tools"]
    assert all(t["toolSpec"]["description"] for t in requests[2]["tools"])
    runs = await run_histories(keel.client, session)
    described = model_results(runs[0])[0]["tools"]
    assert {t["name"] for t in described} >= {"echo", "guarded_record"}
    assert all(t["description"] == "" and t["inputSchema"] == {} for t in described)
    guarded = next(t for t in described if t["name"] == "guarded_record")
    assert guarded["module"] == SAMPLE_TOOLS
    # the next run was handed the specs' digest: its model call does not describe them again
    later = [r for run in runs[1:] for r in model_requests(run)]
    assert later and all(r.get("describe_modules") is None for r in later)
    assert all(r["tools_digest"] == model_results(runs[0])[0]["tools_digest"] for r in later)


def model_requests(history: Any) -> list[dict[str, Any]]:
    """The inputs of the model activities of one run, as JSON, in order."""
    return [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "keel.model.converse"
    ]


def model_results(history: Any) -> list[dict[str, Any]]:
    """The results of the model activities of one run, as JSON, in order."""
    scheduled = {
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "keel.model.converse"
    }
    return [
        json.loads(e.activity_task_completed_event_attributes.result.payloads[0].data)
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    ]


async def test_prompts_sent_during_the_switch_are_all_processed(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    prompts = 12
    config = script(
        [
            respond(tool_use(f"t{i}", "echo", text=str(i)), stop="tool_use")
            if i % 2 == 0
            else respond(text(f"answer {i // 2}"))
            for i in range(2 * prompts)
        ],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        first = await keel.prompt(session, "prompt 0", config=config)
        acks = [
            first,
            *await asyncio.gather(
                *(keel.prompt(session, f"prompt {i}") for i in range(1, prompts))
            ),
        ]
        records = [await keel.wait_turn(session, a.turn_id, timeout_s=60) for a in acks]
        state = await keel.state(session)
    await save_history(keel.client, session, "prompts_across_continue_as_new")
    assert sorted(a.turn_id for a in acks) == list(range(1, prompts + 1))
    assert [r.status for r in records] == ["completed"] * prompts
    assert state.run > 2, "the test should have crossed several runs"
    user_texts = [b.text for m in state.messages if m.role == "user" for b in m.content if b.text]
    by_turn = sorted(acks, key=lambda a: a.turn_id)
    assert len(user_texts) == prompts
    assert len(set(user_texts)) == prompts
    assert user_texts[0] == "prompt 0" and [a.turn_id for a in by_turn] == list(range(1, 13))
    no_dangling(state.messages)


async def test_a_prompt_update_delivered_again_in_the_next_run_makes_no_second_turn(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    # The server can deliver an update completed in the same workflow task as continue-as-new
    # to the new run again, with its id (temporalio/temporal#6375). Sent again here by hand,
    # with the same id, once the run that accepted it has continued as new.
    config = script(
        [
            respond(text("one")),
            respond(tool_use("t1", "echo", text="x"), stop="tool_use"),  # run 1 grows past
            respond(text("two")),  # 20 events in turn 2 and continues as new in it
        ],
        continue_as_new_events=20,
    )
    session = sid()
    second = PromptInput(content=[text_block("two")])
    async with run_worker():
        first = await keel.prompt(session, "one", config=config)
        await keel.wait_turn(session, first.turn_id, timeout_s=30)
        accepted_in = (await keel.state(session)).run
        handle = keel.handle(session)
        ack = await handle.execute_update(AgentSession.prompt, second, id="prompt-two")
        assert (await keel.wait_turn(session, ack.turn_id, timeout_s=30)).status == "completed"
        again = await handle.execute_update(AgentSession.prompt, second, id="prompt-two")
        state = await keel.state(session)
    await save_history(keel.client, session, "prompt_update_again_in_next_run")
    assert accepted_in == 1 and state.run > 1, "the test should have crossed into a new run"
    assert again.turn_id == ack.turn_id == 2
    assert [t.turn_id for t in state.turns] == [1, 2] and state.queued == []


async def test_a_steer_update_delivered_again_in_the_next_run_adds_no_second_guidance(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    # As above, for ``steer``: the steer lands in run 1, the same id again in run 2, during
    # the same turn. Taken twice, the guidance would reach the model twice.
    config = script(
        [
            respond(tool_use("t1", "echo", text="x"), stop="tool_use", delay_s=1.0),
            respond(tool_use("t2", "echo", text="y"), stop="tool_use", delay_s=1.5),
            respond(text("done")),
        ],
        continue_as_new_events=20,  # run 1 ends at the safe point after t1
    )
    session = sid()
    guidance = SteerInput(text="use metric units")
    async with run_worker():
        ack = await keel.prompt(session, "measure it", config=config)
        handle = keel.handle(session)
        steered = await handle.execute_update(AgentSession.steer, guidance, id="steer-one")
        steered_in = (await keel.state(session)).run
        for _ in range(100):
            if (await keel.state(session)).run > 1:
                break
            await asyncio.sleep(0.05)
        again = await handle.execute_update(AgentSession.steer, guidance, id="steer-one")
        again_in = (await keel.state(session)).run
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "steer_update_again_in_next_run")
    assert steered_in == 1 and again_in > 1, "the test should have crossed into a new run"
    assert again.turn_id == steered.turn_id == ack.turn_id
    assert done.status == "completed" and done.cycles == 3, done.error
    texts = [b.text for m in state.messages for b in m.content if b.text is not None]
    assert sum(t.endswith("use metric units") for t in texts) == 1, texts
    assert sum(e.type == "steering_queued" for e in state.events) == 1


async def test_decide_and_cancel_updates_delivered_again_in_a_later_run_act_once(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    # As above, for ``decide`` and ``cancel``: each sent again with its id once the session
    # has moved to a later run and another turn is running. The decision must not come back
    # as an error (it took effect), and the cancel must not stop the turn running now.
    target = tmp_path / "approved.txt"
    config = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(target), value="once"), stop="tool_use"
            ),
            respond(text("recorded")),
            # turn 2 is cancelled while this call waits, so turn 3 gets it again
            respond(text("three"), delay_s=3.0),
        ],
        continue_as_new_events=20,
    )
    session = sid()
    handle = keel.handle(session)
    async with run_worker():
        waiting = await keel.run(session, "record it", config=config, timeout_s=30)
        assert waiting.status == "awaiting_human", waiting
        decision = Decision(interrupt_id=waiting.interrupts[0].id, decision="approve")
        decided = await handle.execute_update(AgentSession.decide, decision, id="decide-one")
        decided_in = (await keel.state(session)).run
        assert (await keel.wait_turn(session, 1, timeout_s=30)).status == "completed"
        second = await keel.prompt(session, "two")
        stop = CancelInput(reason="changed my mind")
        cancelled = await handle.execute_update(AgentSession.cancel, stop, id="cancel-one")
        cancelled_in = (await keel.state(session)).run
        assert (await keel.wait_turn(session, second.turn_id, timeout_s=30)).status == "cancelled"
        third = await keel.prompt(session, "three")
        for _ in range(100):
            if (await keel.state(session)).run > cancelled_in:
                break
            await asyncio.sleep(0.05)
        decided_again = await handle.execute_update(AgentSession.decide, decision, id="decide-one")
        cancelled_again = await handle.execute_update(AgentSession.cancel, stop, id="cancel-one")
        again_in = (await keel.state(session)).run
        done = await keel.wait_turn(session, third.turn_id, timeout_s=30)
    await save_history(keel.client, session, "decide_cancel_again_in_later_run")
    assert decided_in < again_in and cancelled_in < again_in, "should have crossed into a new run"
    assert decided_again == decided and decided.status == "approved"
    assert cancelled_again == cancelled and cancelled.turn_id == second.turn_id
    assert done.status == "completed", done
    assert lines(target) == ["once"]


@pytest.mark.parametrize("damage", ["missing", "corrupted"])
async def test_damaged_store_fails_the_turn_naming_the_digest(
    keel: KeelClient, run_worker: RunWorker, script: Script, store: ConversationStore, damage: str
) -> None:
    config = script([respond(text("first")), respond(text("never"))])
    session = sid()
    async with run_worker(max_cached_workflows=100):
        await keel.run(session, "one", config=config, timeout_s=30)
        root = Path(store.backend.root)  # type: ignore[attr-defined]
        victim = next(p for p in (root / "msg").rglob("*") if p.is_file())
        if damage == "missing":
            victim.unlink()
        else:
            victim.write_bytes(b'{"role":"user","content":[{"text":"forged"}]}')
    # a fresh worker process has no cache: a new store object over the same directory
    fresh = open_store(str(root))
    async with build_worker(keel.client, keel.task_queue, [SAMPLE_TOOLS], store=fresh):
        failed = await keel.run(session, "two", timeout_s=30)
    assert failed.status == "failed"
    assert failed.error is not None and victim.name in failed.error
    assert ("missing" if damage == "missing" else "corrupted") in failed.error


async def test_oversized_prompt_and_tool_result_are_refused_clearly(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(text("hello")),
            respond(tool_use("b", "big", size=1_200_000), stop="tool_use"),
            respond(text("too big, noted")),
        ]
    )
    session = sid()
    async with run_worker():
        await keel.run(session, "hi", config=config, timeout_s=30)
        with pytest.raises(RequestRejected, match="over the limit of 256,000 bytes"):
            await keel.prompt(session, "x" * 1_100_000)
        record = await keel.run(session, "make something big", timeout_s=60)
        state = await keel.state(session)
    assert record.status == "completed"
    [(use_id, status, message)] = result_texts(state.messages[4])
    assert use_id == "b" and status == "error" and "over Keel's limit of 1,000,000 bytes" in message


def test_the_store_spec_in_json_is_stable() -> None:
    # digests are of canonical JSON: key order and spacing never change them
    a = Message.model_validate({"role": "user", "content": [{"text": "hi"}]})
    b = Message.model_validate(json.loads('{"content": [{"text": "hi"}], "role": "user"}'))
    assert canonical_json(a.model_dump(mode="json")) == canonical_json(b.model_dump(mode="json"))
