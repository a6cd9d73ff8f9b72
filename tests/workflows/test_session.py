"""AgentSession on a real Temporal dev server, driven by the scripted model."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHistory, WorkflowUpdateFailedError

from keel import AgentSession, KeelClient, Message, RequestRejected, SessionConfig
from keel.workflows.contracts import PromptInput
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import text_block, tool_uses
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history, wait_update_ids


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def no_dangling(messages: list[Message]) -> None:
    """Every toolUse is answered by a toolResult in the very next message (S5)."""
    for i, msg in enumerate(messages):
        ids = [u.toolUseId for u in tool_uses(msg)]
        if not ids:
            continue
        assert i + 1 < len(messages), f"message {i} ends the conversation with a toolUse"
        answered = [b.toolResult.toolUseId for b in messages[i + 1].content if b.toolResult]
        assert answered[: len(ids)] == ids


def update_events(history: WorkflowHistory) -> list[str]:
    """The update events of a history, by kind (ACCEPTED, COMPLETED ...).

    Without those of the ``wait_turn`` updates that waiting clients (``KeelClient.run``,
    ``wait_turn``) send: they are the client's wait, not a message to the session.
    """
    prefix = "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_"
    waits = wait_update_ids(history)
    out = []
    for event in history.events:
        name = EventType.Name(event.event_type)
        update_id = (
            event.workflow_execution_update_accepted_event_attributes.protocol_instance_id
            or event.workflow_execution_update_completed_event_attributes.meta.update_id
        )
        if not name.startswith(prefix) or update_id in waits:
            continue
        out.append(name.removeprefix(prefix))
    return out


def result_texts(message: Message) -> list[tuple[str, str, str]]:
    out = []
    for block in message.content:
        if block.toolResult is not None:
            body = block.toolResult.content[0]
            value = body.text if body.text is not None else str(body.json_)
            out.append((block.toolResult.toolUseId, block.toolResult.status, value))
    return out


async def test_two_cycle_tool_turn(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(text("let me echo"), tool_use("t1", "echo", text="hi"), stop="tool_use"),
            respond(text("echoed: hi")),
        ],
        system="be brief",
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "echo hi", config=config, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "two_cycle_tool_turn")

    assert record.status == "completed" and record.stop_reason == "end_turn"
    assert record.cycles == 2
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert result_texts(state.messages[2]) == [("t1", "success", "hi")]
    assert state.usage.totalTokens == 40 and record.usage.totalTokens == 40
    requests = model_log()
    assert len(requests) == 2
    assert requests[0]["system"] == "be brief"
    assert [t["toolSpec"]["name"] for t in requests[0]["tools"]].count("echo") == 1
    assert requests[1]["tools"] == requests[0]["tools"]  # by digest the second time
    # the first model call described the tools: no keel.tools.describe activity
    history = await keel.client.get_workflow_handle(session).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["keel.model.converse", "keel.tool.run", "keel.model.converse"]
    # the second call sees the tool result the first one asked for
    assert requests[1]["messages"][2]["content"][0]["toolResult"]["toolUseId"] == "t1"
    kinds = [e.type for e in state.events]
    assert kinds[:3] == ["prompt_queued", "turn_started", "message_added"]
    assert kinds.index("tool_finished") < kinds.index("turn_ended")
    assert kinds[-1] == "turn_ended"
    assert [e.seq for e in state.events] == list(range(1, len(state.events) + 1))


async def test_deferred_append_seen_mid_tool(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("slow1", "slow", seconds=2.0, label="done"), stop="tool_use"),
            respond(text("finished")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go slow", config=config)
        seen_mid_tool = None
        for _ in range(100):
            pending = await keel.pending(session)
            if pending.running:
                seen_mid_tool = await keel.state(session)
                break
            await asyncio.sleep(0.05)
        assert seen_mid_tool is not None, "never saw the tool running"
        # the assistant message sits in pending state, not in the conversation (S5)
        assert [m.role for m in seen_mid_tool.messages] == ["user"]
        assert seen_mid_tool.pending.message is not None
        assert tool_uses(seen_mid_tool.pending.message)[0].toolUseId == "slow1"
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "completed"
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert state.pending.message is None
    no_dangling(state.messages)


async def test_imported_trailing_tool_use_is_never_run(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any, tmp_path: Path
) -> None:
    target = tmp_path / "side-effect.txt"
    history = [
        Message.model_validate({"role": "user", "content": [text("write it")]}),
        Message.model_validate(
            {
                "role": "assistant",
                "content": [tool_use("evil", "record", path=str(target), value="x")],
            }
        ),
    ]
    # responses[i] answers the call that sees i assistant messages; history holds one already
    config = script([respond(text("unused")), respond(text("I will not assume the tool ran"))])
    session = sid()
    async with run_worker():
        record = await keel.run(session, "continue", config=config, messages=history, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "imported_trailing_tool_use")

    assert record.status == "completed"
    assert not target.exists(), "a toolUse from imported history was executed"
    first = model_log()[0]["messages"]
    assert len(first) == 3  # the model was called first, not the tool (S2)
    last_user = first[-1]["content"]
    assert last_user[0]["toolResult"]["toolUseId"] == "evil"
    assert last_user[0]["toolResult"]["status"] == "error"
    assert "not executed" in last_user[0]["toolResult"]["content"][0]["text"]
    assert last_user[1] == {"text": "continue"}
    assert not any(e.type == "tool_started" for e in state.events)
    no_dangling(state.messages)


async def test_a_refused_import_leaves_no_unretrieved_error_behind(
    keel: KeelClient, script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    """A start the server refuses fails once, cleanly; nothing is logged when it is freed.

    temporalio also sets the error on the start operation's handle; left unretrieved, asyncio
    logs it when collected, in whatever code runs then (in Python 3.11 that breaks an
    ``ast.parse`` running at that moment, CPython gh-106905).
    """
    oversized = [Message.model_validate({"role": "user", "content": [text("y" * 2_500_000)]})]

    async def refused() -> str:
        try:
            await keel.prompt(sid(), "hi", config=script([]), messages=oversized)
        except Exception as err:  # noqa: BLE001 - the error is what the test reads
            return str(err)
        return "accepted"

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        assert "Blob data size exceeds limit" in await refused()
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


async def test_parallel_tools_take_the_slowest_time_results_in_order(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(
                tool_use("a", "slow", seconds=1.5, label="A"),
                tool_use("b", "slow_sync", seconds=0.5, label="B"),
                tool_use("c", "slow", seconds=1.0, label="C"),
                stop="tool_use",
            ),
            respond(text("all done")),
        ]
    )
    session = sid()
    async with run_worker():
        start = time.monotonic()
        record = await keel.run(session, "three at once", config=config, timeout_s=30)
        elapsed = time.monotonic() - start
        state = await keel.state(session)
    assert record.status == "completed"
    # one after another they would take 3.0 s of tool time alone
    assert elapsed < 2.9, f"tools did not run in parallel: turn took {elapsed:.2f}s"
    assert result_texts(state.messages[2]) == [
        ("a", "success", "A"),
        ("b", "success", "B"),
        ("c", "success", "C"),
    ]
    finished = [e.detail["id"] for e in state.events if e.type == "tool_finished"]
    assert finished == ["b", "c", "a"]  # they finished in time order; results kept use order


async def test_tool_failures_become_error_results_and_session_stays_healthy(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(
                tool_use("u1", "no_such_tool", x=1),
                tool_use("u2", "add", a="not a number", b=2),
                tool_use("u3", "boom", message="kaboom"),
                tool_use("u4", "hang"),
                tool_use("u5", "add", a=2, b=3),
                stop="tool_use",
            ),
            respond(text("some tools failed")),
            respond(text("second turn fine")),
        ]
    )
    session = sid()
    async with run_worker():
        first = await keel.run(session, "try everything", config=config, timeout_s=60)
        second = await keel.run(session, "still there?", timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "tool_failures")

    assert first.status == "completed" and second.status == "completed"
    results = dict((i, (s, t)) for i, s, t in result_texts(state.messages[2]))
    assert results["u1"][0] == "error" and "unknown tool 'no_such_tool'" in results["u1"][1]
    assert results["u2"][0] == "error" and "a" in results["u2"][1] and "add" in results["u2"][1]
    assert results["u3"][0] == "error" and "kaboom" in results["u3"][1]
    assert results["u4"][0] == "error" and "timed out" in results["u4"][1]
    assert results["u5"] == ("success", "5")
    seen = model_log()[1]["messages"][2]["content"]
    assert [b["toolResult"]["status"] for b in seen] == ["error"] * 4 + ["success"]
    no_dangling(state.messages)


async def test_max_tokens_recovery(keel: KeelClient, run_worker: RunWorker, script: Script) -> None:
    config = script(
        [
            respond(text("I will call"), tool_use("cut", "echo", text="hal"), stop="max_tokens"),
            respond(text("recovered")),
        ]
    )
    session = sid()
    async with run_worker():
        first = await keel.run(session, "long answer", config=config, timeout_s=30)
        second = await keel.run(session, "shorter please", timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "max_tokens")

    assert first.status == "failed" and first.stop_reason == "max_tokens"
    assert first.error == (
        "the model reached its max_tokens limit before finishing its reply; its 1 tool "
        "use(s), possibly incomplete, were not run"
    )
    appended = state.messages[1]
    assert appended.role == "assistant" and not tool_uses(appended)
    assert appended.content[0].text == "I will call"
    assert "was not run" in (appended.content[1].text or "")
    turn1 = [e for e in state.events if e.turn == 1]
    kinds = [e.type for e in turn1]
    assert kinds.index("message_added", kinds.index("model_called")) < kinds.index("turn_ended")
    assert second.status == "completed"
    assert not any(e.type == "tool_started" for e in state.events)
    no_dangling(state.messages)


async def test_max_tokens_in_text_names_no_tool_use(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    """A reply cut off in its text says so, and speaks of no tool use (there was none)."""
    config = script([respond(text("a long answer that was cut"), stop="max_tokens")])
    session = sid()
    async with run_worker():
        record = await keel.run(session, "long answer", config=config, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "failed" and record.stop_reason == "max_tokens"
    assert record.error == "the model reached its max_tokens limit before finishing its reply"
    assert state.messages[1].content[0].text == "a long answer that was cut"
    no_dangling(state.messages)


async def test_queued_prompts_run_in_order(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(tool_use("s", "slow", seconds=1.0, label="x"), stop="tool_use"),
            respond(text("one")),
            respond(text("two")),
            respond(text("three")),
        ]
    )
    session = sid()
    async with run_worker():
        acks = [await keel.prompt(session, "first", config=config)]
        acks.append(await keel.prompt(session, "second"))
        acks.append(await keel.prompt(session, "third"))
        assert [a.turn_id for a in acks] == [1, 2, 3]
        assert acks[2].queued_behind >= 1
        records = [await keel.wait_turn(session, a.turn_id, timeout_s=30) for a in acks]
        state = await keel.state(session)
    assert [r.status for r in records] == ["completed"] * 3
    user_texts = [b.text for m in state.messages if m.role == "user" for b in m.content if b.text]
    assert user_texts == ["first", "second", "third"]
    assert [r.message.content[0].text for r in records if r.message] == ["one", "two", "three"]
    started = [e.turn for e in state.events if e.type == "turn_started"]
    ended = [e.turn for e in state.events if e.type == "turn_ended"]
    assert started == ended == [1, 2, 3]
    assert len(model_log()) == 4


@pytest.mark.parametrize(
    ("content", "role", "expected"),
    [
        ([tool_use("x", "echo", text="pwned")], "user", "toolUse block"),
        (
            [{"toolResult": {"toolUseId": "x", "status": "success", "content": [{"text": "ok"}]}}],
            "user",
            "toolResult block",
        ),
        ([{"reasoningContent": {"reasoningText": {"text": "think"}}}], "user", "reasoningContent"),
        ([text("hello")], "assistant", "role 'user'"),
        ([], "user", "at least one content block"),
        ([text("   ")], "user", "empty text"),
    ],
)
async def test_prompts_with_non_user_content_are_rejected(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    model_log: Any,
    content: list[dict[str, Any]],
    role: str,
    expected: str,
) -> None:
    config = script([respond(text("hello")), respond(text("never"))])
    session = sid()
    async with run_worker():
        await keel.run(session, "hi", config=config, timeout_s=30)
        handle = keel.client.get_workflow_handle(session)
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update(
                "prompt", PromptInput.model_validate({"content": content, "role": role})
            )
        assert expected in str(caught.value.cause)
        history = await handle.fetch_history()
        state = await keel.state(session)
    # only the first prompt's update was written; the validator's rejection left no trace
    assert update_events(history) == ["ACCEPTED", "COMPLETED"]
    assert len(state.turns) == 1
    assert len(model_log()) == 1


async def test_client_rejection_names_the_problem(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script([respond(text("hello"))])
    session = sid()
    async with run_worker():
        await keel.run(session, "hi", config=config, timeout_s=30)
        bad = [tool_use("x", "echo", text="pwned")]
        with pytest.raises(RequestRejected, match="toolUse block"):
            await keel.prompt(
                session, [Message.model_validate({"role": "user", "content": bad}).content[0]]
            )


async def test_cancel_mid_tool_leaves_no_dangling_tool_use(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(
                tool_use("long", "slow", seconds=60.0, label="never"),
                tool_use("quick", "echo", text="ok"),
                stop="tool_use",
            ),
            respond(text("after cancel")),
        ]
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "start something long", config=config)
        for _ in range(100):
            pending = await keel.pending(session)
            if [u.toolUseId for u in pending.running] == ["long"]:
                break
            await asyncio.sleep(0.05)
        start = time.monotonic()
        cancelled = await keel.cancel(session, "user changed their mind")
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=20)
        took = time.monotonic() - start
        with pytest.raises(RequestRejected, match="no turn is running"):
            await keel.cancel(session)
        after = await keel.run(session, "something else", timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "cancel_mid_tool")

    assert cancelled.turn_id == ack.turn_id
    assert record.status == "cancelled" and record.error == "user changed their mind"
    assert took < 15
    results = dict((i, (s, t)) for i, s, t in result_texts(state.messages[2]))
    assert results["long"][0] == "error" and "cancelled" in results["long"][1]
    assert results["quick"] == ("success", "ok")
    assert after.status == "completed"
    no_dangling(state.messages)


async def test_multi_turn_and_close(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script([respond(text("first answer")), respond(text("second answer"))])
    session = sid()
    async with run_worker():
        await keel.run(session, "question one", config=config, timeout_s=30)
        second = await keel.run(session, "question two", timeout_s=30)
        await keel.close(session)
        result = await keel.handle(session).result()
    await save_history(keel.client, session, "multi_turn_close")
    assert second.message is not None and second.message.content[0].text == "second answer"
    assert [len(r["messages"]) for r in model_log()] == [1, 3]
    assert result.turns == 2 and result.usage.totalTokens == 40


async def test_model_failure_ends_turn_not_session(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script([respond(text("only one"))])
    session = sid()
    async with run_worker():
        await keel.run(session, "one", config=config, timeout_s=30)
        failed = await keel.run(session, "two", timeout_s=30)
        state = await keel.state(session)
    assert failed.status == "failed"
    assert failed.error is not None and "past the end" in failed.error
    assert state.status == "idle"


async def test_start_input_with_orphan_tool_result_fails_clearly(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script([respond(text("never"))])
    history = [
        Message.model_validate(
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "ghost", "content": [{"text": "x"}]}}],
            }
        )
    ]
    session = sid()
    async with run_worker():
        handle = await keel.client.start_workflow(
            AgentSession.run,
            SessionInput(config=config, messages=history),
            id=session,
            task_queue=keel.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    assert "orphan toolResult 'ghost'" in str(caught.value.cause)


async def test_a_tool_module_the_worker_lacks_fails_the_turn_clearly(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script([respond(text("never"))], tool_modules=["tests.no_such_tools"])
    session = sid()
    async with run_worker():
        record = await keel.run(session, "hi", config=config, timeout_s=30)
        retry = await keel.run(session, "again", timeout_s=30)
    assert record.status == "failed" and retry.status == "failed"
    assert record.error is not None
    assert "tool module 'tests.no_such_tools' is not loaded on this worker" in record.error
    history = await keel.client.get_workflow_handle(session).fetch_history()
    started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    assert [e.activity_task_started_event_attributes.attempt for e in started] == [1, 1]


async def test_unknown_model_spec_fails_the_turn_clearly(
    keel: KeelClient, run_worker: RunWorker
) -> None:
    # KeelClient refuses it before starting anything (tests/worker/client/test_model_specs.py);
    # a session started around it, with the raw Temporal client, fails its turn saying why
    session = sid()
    config = SessionConfig(model="nosuch:thing")
    async with run_worker():
        await keel.client.start_workflow(
            AgentSession.run,
            SessionInput(config=config, prompt=[text_block("hi")]),
            id=session,
            task_queue=keel.task_queue,
        )
        record = await keel.wait_turn(session, 1, timeout_s=30)
    assert record.status == "failed"
    assert record.error is not None and "unknown model spec 'nosuch:thing'" in record.error


async def test_cycle_budget_ends_a_looping_turn(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    loop = [respond(tool_use(f"t{i}", "echo", text="again"), stop="tool_use") for i in range(5)]
    config = script(loop, max_cycles_per_turn=2, on_budget="fail")
    session = sid()
    async with run_worker():
        record = await keel.run(session, "loop forever", config=config, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "failed" and record.stop_reason == "max_cycles"
    assert record.error == "turn reached its budget of 2 model calls"
    assert record.cycles == 2 and len(model_log()) == 2
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant", "user"]
    no_dangling(state.messages)


async def test_token_budget_ends_turn_and_refuses_prompts(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(text("one"), tokens=10),  # 20 tokens
            respond(tool_use("t", "echo", text="x"), stop="tool_use", tokens=10),  # 40
            respond(text("never reached")),
        ],
        max_session_tokens=30,
        on_budget="fail",
    )
    session = sid()
    async with run_worker():
        first = await keel.run(session, "first", config=config, timeout_s=30)
        second = await keel.run(session, "second", timeout_s=30)
        with pytest.raises(RequestRejected, match="40 tokens of its budget of 30"):
            await keel.prompt(session, "third")
        state = await keel.state(session)
    assert first.status == "completed"
    assert second.status == "failed" and second.stop_reason == "token_budget"
    assert second.cycles == 1 and len(model_log()) == 2
    assert state.usage.totalTokens == 40
    no_dangling(state.messages)


async def test_activities_carry_the_sessions_heartbeat_timeout(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    """A dead worker's model call or tool run is retried after the session's heartbeat timeout.

    2 s unless the session sets its own; the first retry comes 0.25 s later.
    """
    responses = [respond(tool_use("t1", "echo", text="hi"), stop="tool_use"), respond(text("ok"))]
    own, default = sid(), sid()
    async with run_worker():
        for session, config in (
            (own, script(responses, heartbeat_timeout_s=2.5)),
            (default, script(responses)),
        ):
            record = await keel.run(session, "go", config=config, timeout_s=30)
            assert record.status == "completed"
    await save_history(keel.client, own, "session_heartbeat_timeout")
    for session, seconds in ((own, 2.5), (default, 30.0)):
        history = await keel.client.get_workflow_handle(session).fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert [a.activity_type.name for a in scheduled] == [
            "keel.model.converse",
            "keel.tool.run",
            "keel.model.converse",
        ]
        assert {a.heartbeat_timeout.ToTimedelta().total_seconds() for a in scheduled} == {seconds}
        backoffs = {a.retry_policy.initial_interval.ToTimedelta() for a in scheduled}
        assert {b.total_seconds() for b in backoffs} == {0.25}
    with pytest.raises(ValidationError, match="heartbeat_timeout_s"):
        SessionConfig(model="scripted:x.json", heartbeat_timeout_s=0.1)
