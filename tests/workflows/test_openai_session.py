"""AgentSession on a real Temporal dev server, driven by the openai provider and a fake server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from keel import KeelClient, SessionConfig
from keel.workflows.messages import tool_uses
from tests.fakes.openai_server import Failure, FakeOpenAIServer, Reply, ToolCall
from tests.helpers.fixture_types import RunWorker

CONFIG = SessionConfig(model="openai:llama-test", tool_modules=["tests.sample_tools"])


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake server; the in-process worker's provider reads OPENAI_BASE_URL per call."""
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server


def sid() -> str:
    return f"s-oai-{uuid.uuid4().hex[:10]}"


def add_call(call_id: str | None, a: int, b: int) -> Reply:
    return Reply(
        text="adding",
        tool_calls=[ToolCall("add", {"a": a, "b": b}, id=call_id)],
        finish_reason="tool_calls",
    )


async def test_two_cycle_tool_turn(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(add_call("call_abc", 2, 3), Reply(text="2 + 3 = 5"))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "add 2 and 3", config=CONFIG, timeout_s=20)
        state = await keel.state(session)

    assert record.status == "completed" and record.stop_reason == "end_turn"
    assert record.cycles == 2 and record.usage.totalTokens == 34
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    [use] = tool_uses(state.messages[1])
    assert (use.toolUseId, use.name, use.input) == ("call_abc", "add", {"a": 2, "b": 3})
    result = state.messages[2].content[0].toolResult
    assert result is not None and result.toolUseId == "call_abc" and result.status == "success"
    assert state.messages[3].content[0].text == "2 + 3 = 5"

    first, second = openai.bodies
    assert "add" in [t["function"]["name"] for t in first["tools"]]
    assert first["messages"] == [{"role": "user", "content": "add 2 and 3"}]
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": "adding",
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "5"},
    ]


async def test_id_less_tool_calls_in_consecutive_cycles_do_not_collide(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(add_call(None, 1, 2), add_call(None, 3, 4), Reply(text="3 and 7"))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "two sums", config=CONFIG, timeout_s=20)
        state = await keel.state(session)
    assert record.status == "completed" and record.cycles == 3
    ids = [u.toolUseId for m in state.messages for u in tool_uses(m)]
    assert ids == ["call_1_1_0", "call_1_2_0"]
    assert openai.bodies[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1_2_0",
        "content": "7",
    }


async def test_rate_limit_is_retried_once(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Failure(429, "rate limited", type="rate_limit_error"), Reply(text="hello"))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "hi", config=CONFIG, timeout_s=20)
    assert record.status == "completed" and record.message is not None
    assert record.message.content[0].text == "hello"
    assert record.cycles == 1
    assert len(openai.requests) == 2 and openai.bodies[0] == openai.bodies[1]


async def test_bad_request_fails_the_turn_fast_and_session_stays_usable(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Failure(400, "invalid tool schema for 'add'"), Reply(text="all good now"))
    session = sid()
    async with run_worker():
        failed = await keel.run(session, "first", config=CONFIG, timeout_s=20)
        assert len(openai.requests) == 1  # not retried
        second = await keel.run(session, "second", timeout_s=20)
        state = await keel.state(session)
    assert failed.status == "failed"
    assert failed.error is not None and "invalid tool schema for 'add'" in failed.error
    assert "HTTP 400" in failed.error
    assert second.status == "completed" and second.message is not None
    assert second.message.content[0].text == "all good now"
    assert len(openai.requests) == 2
    # the failed turn's prompt stays in the conversation; the model sees both prompts
    assert openai.bodies[1]["messages"] == [{"role": "user", "content": "first\nsecond"}]
    assert [m.role for m in state.messages] == ["user", "assistant"]


async def test_cut_stream_is_retried(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Reply(text="this answer is cut off", cut_after=2), Reply(text="complete"))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "hi", config=CONFIG, timeout_s=20)
    assert record.status == "completed" and record.message is not None
    assert record.message.content[0].text == "complete"
    assert len(openai.requests) == 2


async def test_length_mid_tool_call_fails_the_turn_without_tool_use(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(
        Reply(
            text="I will add",
            tool_calls=[ToolCall("add", '{"a": 2, "b"', id="call_cut")],
            finish_reason="length",
        )
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "add", config=CONFIG, timeout_s=20)
        state = await keel.state(session)
    assert record.status == "failed" and record.stop_reason == "max_tokens"
    assert record.error is not None and "max_tokens" in record.error
    assert [m.role for m in state.messages] == ["user", "assistant"]
    appended = state.messages[1]
    assert tool_uses(appended) == []
    assert appended.content[0].text == "I will add"
    assert any("'add' was not run" in (b.text or "") for b in appended.content)
    assert not any(e.type == "tool_started" for e in state.events)
    assert len(openai.requests) == 1
