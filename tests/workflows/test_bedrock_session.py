"""AgentSession with the bedrock provider: real boto3, a fake Bedrock, a real dev server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from keel import KeelClient, SessionConfig
from keel.workflows.messages import tool_uses
from tests.fakes.bedrock_server import (
    FakeBedrock,
    HttpError,
    Reply,
    StreamCut,
    fake_bedrock_env,
)
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import SAMPLE_TOOLS, text, tool_use
from tests.workflows.test_session import no_dangling

CONFIG = SessionConfig(model="bedrock:anthropic.claude-test", tool_modules=[SAMPLE_TOOLS])


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    with fake_bedrock_env(monkeypatch, tmp_path) as server:
        yield server


def sid() -> str:
    return f"b-{uuid.uuid4().hex[:10]}"


async def test_two_cycle_tool_turn(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(
        Reply([text("let me echo"), tool_use("t1", "echo", text="hi")], stop_reason="tool_use"),
        Reply([text("echoed: hi")]),
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "echo hi", config=CONFIG, timeout_s=30)
        state = await keel.state(session)

    assert record.status == "completed" and record.stop_reason == "end_turn", record
    assert record.cycles == 2 and record.usage.totalTokens == 30
    assert record.message is not None and record.message.content[0].text == "echoed: hi"
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    first, second = bedrock.requests
    assert first.path == second.path == "/model/anthropic.claude-test/converse-stream"
    assert first.body["messages"] == [{"role": "user", "content": [{"text": "echo hi"}]}]
    assert "echo" in [t["toolSpec"]["name"] for t in first.body["toolConfig"]["tools"]]
    # the second call carries the assistant's tool use and the tool's result
    assert second.body["messages"][1]["content"] == [
        {"text": "let me echo"},
        tool_use("t1", "echo", text="hi"),
    ]
    assert second.body["messages"][2] == {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "hi"}]}}
        ],
    }
    no_dangling(state.messages)


async def test_throttling_is_retried_by_temporal(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(
        HttpError(429, "ThrottlingException", "Too many requests, please wait."),
        Reply([text("after the wait")]),
    )
    async with run_worker():
        record = await keel.run(sid(), "hello", config=CONFIG, timeout_s=30)
    assert record.status == "completed", record
    assert record.message is not None and record.message.content[0].text == "after the wait"
    # one attempt refused, one retried by Temporal; boto3 itself retried nothing
    assert len(bedrock.requests) == 2


async def test_validation_error_fails_the_turn_fast_and_session_survives(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(HttpError(400, "ValidationException", "messages.0.content.0: bad block"))
    session = sid()
    async with run_worker():
        started = time.monotonic()
        failed = await keel.run(session, "break it", config=CONFIG, timeout_s=30)
        elapsed = time.monotonic() - started
        assert len(bedrock.requests) == 1  # no retry loop
        bedrock.script(Reply([text("all good")]))
        ok = await keel.run(session, "try again", timeout_s=30)
        state = await keel.state(session)

    assert failed.status == "failed", failed
    assert failed.error is not None
    assert "ValidationException: messages.0.content.0: bad block" in failed.error
    assert "anthropic.claude-test" in failed.error
    assert elapsed < 5
    assert ok.status == "completed" and state.status == "idle"
    assert len(bedrock.requests) == 2
    # the failed turn appended no assistant message: the next request has the two prompts only
    resent = bedrock.requests[1].body["messages"]
    assert {m["role"] for m in resent} == {"user"}
    assert [b["text"] for m in resent for b in m["content"]] == ["break it", "try again"]


async def test_stream_cut_mid_message_is_retried(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(
        StreamCut(Reply([text("a partial answer that never ends")]), after_events=3),
        Reply([text("the whole answer")]),
    )
    async with run_worker():
        record = await keel.run(sid(), "hello", config=CONFIG, timeout_s=30)
    assert record.status == "completed", record
    assert record.message is not None
    assert [b.text for b in record.message.content] == ["the whole answer"]
    assert len(bedrock.requests) == 2


async def test_max_tokens_mid_tool_use_runs_nothing(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    partial = {"toolUse": {"toolUseId": "cut", "name": "echo", "input": '{"text": "hal'}}
    bedrock.script(Reply([text("I will call"), partial], stop_reason="max_tokens"))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "long answer", config=CONFIG, timeout_s=30)
        state = await keel.state(session)

    assert record.status == "failed" and record.stop_reason == "max_tokens", record
    assert record.error is not None and "max_tokens" in record.error
    appended = state.messages[-1]
    assert appended.role == "assistant" and not tool_uses(appended)
    assert appended.content[0].text == "I will call"
    assert not any(e.type == "tool_started" for e in state.events)
    assert len(bedrock.requests) == 1
    no_dangling(state.messages)


async def test_context_window_limits_what_the_model_sees_not_what_is_kept(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(
        *(
            Reply([tool_use(f"w{i}", "echo", text=str(i))], stop_reason="tool_use")
            for i in range(4)
        ),
        Reply([text("done")]),
    )
    config = CONFIG.model_copy(update={"context_messages": 3})
    session = sid()
    async with run_worker():
        record = await keel.run(session, "loop a little", config=config, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "completed", record
    assert len(state.messages) == 10  # everything is kept
    last = bedrock.requests[-1].body["messages"]
    assert last[0] == {"role": "user", "content": [{"text": "loop a little"}]}
    assert len(last) == 3  # the task, then the latest whole tool-use / tool-result pair
    assert last[1]["content"][0]["toolUse"]["toolUseId"] == "w3"
    assert last[2]["content"][0]["toolResult"]["toolUseId"] == "w3"
