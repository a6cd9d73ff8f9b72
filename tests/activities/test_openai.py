"""The openai provider against a scripted local chat-completions server."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

import keel.activities.models.openai as openai_module
from keel import ConversationStore, InferenceConfig, KeelClient, Message, SessionConfig
from keel.activities.model_call import ModelActivities
from keel.activities.models import resolve_model
from keel.activities.models.base import ModelError
from keel.activities.models.openai import OpenAIProvider, OpenAITransientError
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.activity_options import MODEL_ACTIVITY, MODEL_ERROR_NON_RETRYABLE
from keel.workflows.contracts import ToolSpec
from tests.fakes.openai_server import (
    CHAT_PATH,
    EmptyStream,
    Failure,
    FakeOpenAIServer,
    RawBody,
    Reply,
    StreamError,
    ToolCall,
)
from tests.helpers.fixture_types import RunWorker

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake server, with OPENAI_BASE_URL pointing at it and no API key.

    The servers found not to stream with tools start empty, as in a new worker process.
    """
    monkeypatch.setattr(openai_module, "_UNSTREAMED_TOOLS", set())
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server


def request(*messages: dict[str, Any], **fields: Any) -> ModelRequest:
    fields.setdefault("messages", [Message.model_validate(m) for m in messages] or [user("hi")])
    fields.setdefault("turn", 1)
    fields.setdefault("cycle", 1)
    fields.setdefault("model", "openai:llama-test")
    return ModelRequest(session_id="s-1", **fields)


def user(*texts: str) -> Message:
    return Message.model_validate({"role": "user", "content": [{"text": t} for t in texts]})


class Deltas:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, delta: str) -> None:
        self.calls.append(delta)


def converse(
    req: ModelRequest | None = None, spec: str = "llama-test"
) -> tuple[ModelResponse, Deltas]:
    deltas = Deltas()
    response = OpenAIProvider(spec, os.environ).converse(req or request(), deltas)
    return response, deltas


# ----------------------------------------------------------------------------- spec and setup


def test_spec_resolves_and_reads_environment_at_creation(
    openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = resolve_model("openai:llama3.2:3b?timeout=5", os.environ)
    assert isinstance(provider, OpenAIProvider)
    assert provider.model == "llama3.2:3b" and provider.timeout_s == 5.0 and provider.stream
    assert provider.url == f"{openai.base_url}/chat/completions"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid:1/v1/")
    assert OpenAIProvider("m", os.environ).base_url == "http://example.invalid:1/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIProvider("m", os.environ).base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    "spec",
    ["", "?stream=false", "m?stream=maybe", "m?colour=red", "m?timeout=0", "m?tool_choice=any"],
)
def test_bad_specs_are_model_errors(spec: str) -> None:
    with pytest.raises(ModelError):
        OpenAIProvider(spec, os.environ)


def test_bad_base_url_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:11434")
    with pytest.raises(ModelError, match="OPENAI_BASE_URL"):
        OpenAIProvider("m", os.environ)


# ------------------------------------------------------------------------------ request body


def test_request_body_field_by_field(openai: FakeOpenAIServer) -> None:
    png = b"\x89PNG fake"
    conversation: list[dict[str, Any]] = [
        {"role": "user", "content": [{"text": "add 2 and 3"}, {"text": "then 4 and 5"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "adding"},
                {"toolUse": {"toolUseId": "c1", "name": "add", "input": {"a": 2, "b": 3}}},
                {"toolUse": {"toolUseId": "c2", "name": "add", "input": {"a": 4, "b": 5}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "c1", "content": [{"json": 5}]}},
                {
                    "toolResult": {
                        "toolUseId": "c2",
                        "status": "error",
                        "content": [{"text": "overflow"}],
                    }
                },
                {"text": "and this picture?"},
                {"image": {"format": "png", "source": {"bytes": base64.b64encode(png).decode()}}},
            ],
        },
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "c3", "name": "add"}}]},
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "c3", "content": [{"text": "0"}]}}],
        },
    ]
    req = request(
        *conversation,
        system="be brief",
        tools=[ToolSpec(name="add", description="Add two integers.", inputSchema=ADD_SCHEMA)],
        inference=InferenceConfig(maxTokens=256, temperature=0.2, topP=0.9, stopSequences=["##"]),
    )
    openai.enqueue(Reply(text="ok"))
    converse(req)

    [seen] = openai.requests
    assert seen.path == CHAT_PATH
    assert seen.headers["content-type"] == "application/json"
    assert "authorization" not in seen.headers
    body = seen.body
    assert body["model"] == "llama-test"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256 and body["temperature"] == 0.2
    assert body["top_p"] == 0.9 and body["stop"] == ["##"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": ADD_SCHEMA,
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "add 2 and 3\nthen 4 and 5"},
        {
            "role": "assistant",
            "content": "adding",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 4, "b": 5}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: overflow"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this picture?"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "0"},
    ]


def test_minimal_body_leaves_optional_fields_out(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="ok"))
    converse()
    body = openai.bodies[0]
    assert set(body) == {"model", "messages", "stream", "stream_options"}
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_api_key_is_sent_as_bearer_token(
    openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    openai.enqueue(Reply(text="ok"))
    converse()
    assert openai.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_documents_become_text_or_a_note(openai: FakeOpenAIServer) -> None:
    notes = base64.b64encode(b"line one\nline two").decode()
    pdf = base64.b64encode(b"%PDF-1.4").decode()
    openai.enqueue(Reply(text="ok"))
    converse(
        request(
            {
                "role": "user",
                "content": [
                    {"text": "read these"},
                    {"document": {"format": "md", "name": "notes", "source": {"bytes": notes}}},
                    {"document": {"format": "pdf", "name": "paper", "source": {"bytes": pdf}}},
                ],
            }
        )
    )
    content = openai.bodies[0]["messages"][0]["content"]
    assert content.startswith("read these\n[document 'notes' (md)]\nline one\nline two\n")
    assert "[document 'paper' (pdf) not sent" in content


# --------------------------------------------------------------------------- stream assembly


def test_stream_assembles_text_and_two_tool_calls(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        Reply(
            text="Let me add both pairs.",
            tool_calls=[
                ToolCall("add", {"a": 2, "b": 3}, id="call_x1"),
                ToolCall("add", {"a": 40, "b": 2}, id="call_x2"),
            ],
            finish_reason="tool_calls",
            usage={"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
        )
    )
    response, deltas = converse()

    assert response.stopReason == "tool_use"
    assert response.message.role == "assistant"
    assert response.message.model_dump(mode="json")["content"] == [
        {"text": "Let me add both pairs."},
        {"toolUse": {"toolUseId": "call_x1", "name": "add", "input": {"a": 2, "b": 3}}},
        {"toolUse": {"toolUseId": "call_x2", "name": "add", "input": {"a": 40, "b": 2}}},
    ]
    assert response.usage.model_dump() == {"inputTokens": 31, "outputTokens": 9, "totalTokens": 40}
    # text arrives in pieces; every other chunk is reported as progress without text
    texts = [d for d in deltas.calls if d]
    assert len(texts) == 3 and "".join(texts) == "Let me add both pairs."
    assert deltas.calls.count("") >= 7  # role, 2 tool headers, 4+ argument chunks, finish, usage


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "content_filtered"),
    ],
)
def test_finish_reasons_map_to_stop_reasons(
    openai: FakeOpenAIServer, finish: str, stop: str
) -> None:
    calls = [ToolCall("add", {"a": 1, "b": 1}, id="c9")] if finish == "tool_calls" else []
    openai.enqueue(Reply(text="x", tool_calls=calls, finish_reason=finish))
    response, _ = converse()
    assert response.stopReason == stop


def test_stop_with_tool_calls_means_tool_use(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2}, id="c1")]))
    response, _ = converse()
    assert response.stopReason == "tool_use"
    assert response.message.content[0].toolUse is not None


def test_vllm_matched_stop_sequence(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="a", extra_choice_fields={"stop_reason": "##"}))
    response, _ = converse(request(inference=InferenceConfig(stopSequences=["##"])))
    assert response.stopReason == "stop_sequence"


def test_incomplete_arguments_become_empty_input(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        Reply(
            text="I will add",
            tool_calls=[ToolCall("add", '{"a": 2, "b"', id="cut1")],
            finish_reason="length",
        )
    )
    response, _ = converse()
    assert response.stopReason == "max_tokens"
    use = response.message.content[1].toolUse
    assert use is not None and use.toolUseId == "cut1" and use.input == {}


def test_missing_ids_are_generated_stable_and_unique(openai: FakeOpenAIServer) -> None:
    reply = Reply(
        tool_calls=[ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})],
        finish_reason="tool_calls",
    )
    openai.enqueue(reply, reply)
    first, _ = converse()
    again, _ = converse()
    ids = [b.toolUse.toolUseId for b in first.message.content if b.toolUse]
    assert ids == ["call_1_1_0", "call_1_1_1"]
    assert first == again  # a retry of the same call gives the same ids

    # an id the conversation already used is replaced, so the workflow sees no duplicate
    earlier = {
        "role": "assistant",
        "content": [{"toolUse": {"toolUseId": "dup", "name": "add", "input": {}}}],
    }
    answer = {"role": "user", "content": [{"toolResult": {"toolUseId": "dup", "content": []}}]}
    openai.enqueue(Reply(tool_calls=[ToolCall("add", {}, id="dup")], finish_reason="tool_calls"))
    later = request({"role": "user", "content": [{"text": "go"}]}, earlier, answer, turn=2, cycle=3)
    response, _ = converse(later)
    assert response.message.content[0].toolUse is not None
    assert response.message.content[0].toolUse.toolUseId == "call_2_3_0"


def test_stream_closed_after_finish_without_done_is_accepted(openai: FakeOpenAIServer) -> None:
    # finish chunk sent, then the body ends cleanly without usage or [DONE]
    openai.enqueue(Reply(text="fine", usage=None, done=False))
    response, _ = converse()
    assert response.stopReason == "end_turn"
    assert response.usage.unknown is True and response.usage.totalTokens == 0


# ----------------------------------------------------------------------------- non-streaming


def test_non_streaming_spec(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        Reply(
            text="two calls",
            tool_calls=[
                ToolCall("add", {"a": 1, "b": 2}, id="j1"),
                ToolCall("echo", {"text": "z"}),
            ],
            finish_reason="tool_calls",
            usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        )
    )
    response, deltas = converse(spec="llama-test?stream=false")
    body = openai.bodies[0]
    assert body["stream"] is False and "stream_options" not in body
    assert openai.requests[0].headers["accept"] == "application/json"
    assert response.stopReason == "tool_use"
    assert response.message.model_dump(mode="json")["content"] == [
        {"text": "two calls"},
        {"toolUse": {"toolUseId": "j1", "name": "add", "input": {"a": 1, "b": 2}}},
        {"toolUse": {"toolUseId": "call_1_1_1", "name": "echo", "input": {"text": "z"}}},
    ]
    assert response.usage.totalTokens == 10
    assert deltas.calls == ["two calls"]


def test_json_answer_to_a_streaming_request_is_read(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="plain json", as_json=True))
    response, _ = converse()
    assert openai.bodies[0]["stream"] is True
    assert response.message.content[0].text == "plain json"
    assert response.stopReason == "end_turn" and response.usage.inputTokens == 12


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("status", [429, 500, 503, 408])
def test_retryable_statuses(openai: FakeOpenAIServer, status: int) -> None:
    openai.enqueue(Failure(status, "slow down please", type="rate_limit_error"))
    with pytest.raises(OpenAITransientError) as caught:
        converse()
    assert not isinstance(caught.value, ModelError)
    assert f"HTTP {status}" in str(caught.value) and "slow down please" in str(caught.value)


def test_cut_stream_is_retryable(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        Reply(text="partial answer", tool_calls=[ToolCall("add", {"a": 1})], cut_after=3)
    )
    deltas = Deltas()
    with pytest.raises(OpenAITransientError, match="broke off|cut short") as caught:
        OpenAIProvider("llama-test", os.environ).converse(request(), deltas)
    assert not isinstance(caught.value, ModelError)
    assert "retry" not in str(caught.value)  # the activity says whether it retries
    assert "".join(deltas.calls)  # some text had arrived before the cut


def test_stream_without_finish_or_done_is_retryable(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="never finished", finish_reason=None, usage=None, done=False))
    with pytest.raises(OpenAITransientError, match="before a finish reason"):
        converse()


def test_error_event_in_stream_is_retryable(openai: FakeOpenAIServer) -> None:
    openai.enqueue(StreamError(message="CUDA out of memory"))
    with pytest.raises(OpenAITransientError, match="CUDA out of memory"):
        converse()


def test_400_is_a_model_error_with_the_message(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Failure(400, "tools: invalid JSON schema for 'add'"))
    with pytest.raises(ModelError) as caught:
        converse()
    assert "HTTP 400" in str(caught.value)
    assert "tools: invalid JSON schema for 'add'" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403, 422])
def test_other_client_errors_are_model_errors(openai: FakeOpenAIServer, status: int) -> None:
    openai.enqueue(Failure(status, "nope"))
    with pytest.raises(ModelError, match=f"HTTP {status}.*nope"):
        converse()


def test_404_is_a_model_error_naming_the_model(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Failure(404, 'model "llama-test" not found, try pulling it first'))
    with pytest.raises(ModelError) as caught:
        converse()
    text = str(caught.value)
    assert "HTTP 404" in text and "not found, try pulling it first" in text
    assert "may not exist on the server" in text


def test_wrong_base_path_is_a_404_model_error(
    openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai.base_url.removesuffix("/v1"))
    with pytest.raises(ModelError, match="HTTP 404"):
        converse()
    assert openai.requests[0].path == "/chat/completions"


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
        "the request exceeds the available context size, try increasing it",
    ],
)
def test_context_length_is_a_model_error(openai: FakeOpenAIServer, message: str) -> None:
    openai.enqueue(Failure(400, message, code="context_length_exceeded"))
    with pytest.raises(ModelError, match="context window") as caught:
        converse()
    assert message in str(caught.value)


def test_connection_refused_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with pytest.raises(OpenAITransientError, match=r"unreachable \(connection refused\)") as caught:
        converse()
    assert not isinstance(caught.value, ModelError)


def test_timeout_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # accepts connections (backlog) but never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{sock.getsockname()[1]}/v1")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        with pytest.raises(OpenAITransientError):
            converse(spec="llama-test?timeout=0.3")


def test_error_body_shapes() -> None:
    # the fake sends OpenAI's shape; the parser also knows plain-string errors and details
    from keel.activities.models.openai_errors import error_message as _error_message

    assert _error_message(json.dumps({"error": "model not loaded"}).encode()) == "model not loaded"
    assert _error_message(json.dumps({"detail": "bad field"}).encode()) == "bad field"
    assert _error_message(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"


# ------------------------------------------------------------------------------- tool_choice

ADD = ToolSpec(name="add", description="Add two integers.", inputSchema=ADD_SCHEMA)


def test_tool_choice_auto_is_sent_only_with_tools(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="ok"), Reply(text="ok"))
    converse(request(tools=[ADD]))
    converse(request())
    with_tools, without = openai.bodies
    assert with_tools["tool_choice"] == "auto" and with_tools["tools"]
    assert "tool_choice" not in without and "tools" not in without


def test_tool_choice_omit_leaves_it_out(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="ok"))
    provider = resolve_model("openai:llama-test?tool_choice=omit", os.environ)
    assert isinstance(provider, OpenAIProvider) and provider.tool_choice == "omit"
    provider.converse(request(tools=[ADD]), Deltas())
    assert "tool_choice" not in openai.bodies[0] and openai.bodies[0]["tools"]


# ------------------------------------------------------------------- streaming with tools


def test_empty_stream_with_tools_falls_back_to_unstreamed_and_is_remembered(
    openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    # llama-cpp-python: a streamed request with tools gets 200 and not one event
    call = ToolCall("add", {"a": 1, "b": 2}, id="c1")
    openai.enqueue(
        EmptyStream(),
        Reply(tool_calls=[call], finish_reason="tool_calls"),
        Reply(text="again, unstreamed"),
        Reply(text="no tools: streamed"),
    )
    with caplog.at_level(logging.WARNING, logger="keel.activities.models.openai"):
        first, deltas = converse(request(tools=[ADD]))
        second, _ = converse(request(tools=[ADD]))  # a new provider: a later call
        third, _ = converse(request())
    assert [b["stream"] for b in openai.bodies] == [True, False, False, True]
    assert openai.bodies[1]["tool_choice"] == "auto" and "stream_options" not in openai.bodies[1]
    assert first.stopReason == "tool_use" and first.message.content[0].toolUse is not None
    assert first.usage.totalTokens == 17 and first.usage.unknown is None
    assert second.message.content[0].text == "again, unstreamed"
    assert third.message.content[0].text == "no tools: streamed"
    assert deltas.calls == [""]  # the unstreamed answer: no text, one progress call
    said = [r.getMessage() for r in caplog.records if "cannot stream" in r.getMessage()]
    assert len(said) == 1, said  # once per process, not per call
    assert openai.base_url in said[0] and "empty stream" in said[0]


def test_error_saying_no_streaming_with_tools_falls_back(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        StreamError(text="", message="Automatic streaming tool choice is not supported"),
        Reply(text="fine"),
    )
    response, _ = converse(request(tools=[ADD]))
    assert response.message.content[0].text == "fine"
    assert [b["stream"] for b in openai.bodies] == [True, False]


def test_http_error_saying_no_streaming_with_tools_falls_back(openai: FakeOpenAIServer) -> None:
    openai.enqueue(
        Failure(400, "Tool calls are not supported in streaming mode"), Reply(text="fine")
    )
    response, _ = converse(request(tools=[ADD]))
    assert response.message.content[0].text == "fine"
    assert [b["stream"] for b in openai.bodies] == [True, False]


def test_empty_stream_without_tools_is_asked_again_unstreamed_and_not_remembered(
    openai: FakeOpenAIServer,
) -> None:
    """llama-cpp-python fails inside a stream it answered 200 (past the context window, say).

    The same request, unstreamed, says why (or answers); the next one streams again.
    """
    openai.enqueue(EmptyStream(), Reply(text="ok"), Reply(text="again"))
    answered, _ = converse()
    assert answered.message.content[0].text == "ok"
    converse(request(tools=[ADD]))
    assert [b["stream"] for b in openai.bodies] == [True, False, True]


# ------------------------------------------------------------------------------------- usage


def test_usage_not_reported_is_unknown_not_zero(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="no usage chunk", usage=None), Reply(text="counted"))
    unreported, _ = converse()
    reported, _ = converse()
    assert unreported.usage.unknown is True
    assert unreported.usage.model_dump() == {
        "inputTokens": 0,
        "outputTokens": 0,
        "totalTokens": 0,
        "unknown": True,
    }
    assert reported.usage.unknown is None and "unknown" not in reported.usage.model_dump()
    total = reported.usage + unreported.usage
    assert total.unknown is True and total.totalTokens == 17


# ------------------------------------------------------------------------- more error shapes


@pytest.mark.parametrize("spec", ["llama-test?stream=false", "llama-test"])
def test_empty_choices_is_a_clear_model_error(openai: FakeOpenAIServer, spec: str) -> None:
    # a 200 JSON body with "choices": [] (to a streamed request too: a server ignoring stream)
    openai.enqueue(RawBody({"id": "x", "object": "chat.completion", "choices": []}))
    with pytest.raises(ModelError, match="answered without choices") as caught:
        converse(spec=spec)
    assert openai.base_url in str(caught.value)


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_names_the_server_and_status(openai: FakeOpenAIServer, status: int) -> None:
    openai.enqueue(Failure(status, "model is loading"))
    with pytest.raises(OpenAITransientError) as caught:
        converse()
    text = str(caught.value)
    assert text.startswith(f"model server {openai.base_url}")
    assert f"HTTP {status}: model is loading" in text and "retry" not in text


# --------------------------------------------------------------------------------- abort


def test_abort_closes_a_long_unstreamed_request_at_once(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="late", delay_s=60))
    provider = OpenAIProvider("llama-test?stream=false", os.environ)
    outcome: list[BaseException | ModelResponse] = []

    def call() -> None:
        try:
            outcome.append(provider.converse(request(), Deltas()))
        except BaseException as err:  # noqa: B036 - the test reads it
            outcome.append(err)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 5
    while not openai.requests:  # the request is at the server, which sits on it
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    aborted_at = time.monotonic()
    provider.abort()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - aborted_at < 2
    [err] = outcome
    assert isinstance(err, OpenAITransientError) and "cancelled" in str(err)
    deadline = time.monotonic() + 2
    while not openai.disconnects:  # the server saw its client go away
        assert time.monotonic() < deadline, "the server never saw the connection close"
        time.sleep(0.02)
    assert openai.disconnects[0].at - aborted_at < 2


def test_abort_of_a_streamed_request_with_tools_is_no_fallback(openai: FakeOpenAIServer) -> None:
    # shut before any event arrived: that empty stream says nothing about the server
    openai.enqueue(Reply(text="late", delay_s=60), Reply(text="never asked for"))
    provider = OpenAIProvider("llama-test", os.environ)
    timer = threading.Timer(0.5, provider.abort)
    timer.start()
    with pytest.raises(OpenAITransientError, match="cancelled"):
        provider.converse(request(tools=[ADD]), Deltas())
    timer.join()
    assert len(openai.requests) == 1 and openai_module._UNSTREAMED_TOOLS == set()


def test_abort_before_the_request_ends_it_when_it_connects(openai: FakeOpenAIServer) -> None:
    openai.enqueue(Reply(text="late", delay_s=60))
    provider = OpenAIProvider("llama-test?stream=false", os.environ)
    provider.abort()
    started = time.monotonic()
    with pytest.raises(OpenAITransientError, match="cancelled"):
        provider.converse(request(), Deltas())
    assert time.monotonic() - started < 2


# ------------------------------------------- through Temporal: retries, final failure, cancel


@workflow.defn(name="OneModelCall", sandboxed=False)
class OneModelCall:
    """Calls ``keel.model.converse`` once, with a short retry policy of three attempts."""

    @workflow.run
    async def run(self, request: ModelRequest) -> ModelResponse:
        response: ModelResponse = await workflow.execute_activity(
            MODEL_ACTIVITY,
            request,
            result_type=ModelResponse,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=0.1),
                maximum_attempts=3,
                non_retryable_error_types=[MODEL_ERROR_NON_RETRYABLE],
            ),
        )
        return response


async def one_call(
    client: Client, store: ConversationStore, spec: str = "openai:llama-test"
) -> ModelResponse:
    queue = f"one-call-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[OneModelCall],
        activities=[ModelActivities(store, environ=os.environ).converse],
        max_cached_workflows=0,
    ):
        result: ModelResponse = await client.execute_workflow(
            OneModelCall.run,
            request(model=spec),
            id=f"one-call-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(seconds=60),
        )
        return result


def model_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Warnings and worse from the model activity and the SDK's activity worker."""
    return [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("temporalio", "keel"))
    ]


def failure_of(caught: pytest.ExceptionInfo[WorkflowFailureError]) -> ApplicationError:
    cause = caught.value.cause
    assert isinstance(cause, ActivityError) and isinstance(cause.cause, ApplicationError)
    return cause.cause


async def test_unreachable_server_one_line_per_retry_and_a_final_message(
    client: Client,
    store: ConversationStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", base)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(WorkflowFailureError) as caught,
    ):
        await one_call(client, store)
    failure = failure_of(caught)
    assert failure.message.startswith(f"model server {base} (model 'llama-test') unreachable")
    assert failure.message.endswith("(connection refused); gave up after 3 attempts")
    assert "will retry" not in str(failure) and failure.non_retryable
    lines = model_lines(caplog)
    texts = [r.getMessage() for r in lines]
    assert len(lines) == 3, texts  # one line an attempt
    assert "unreachable (connection refused); retrying in 0.1 s (attempt 1 of 3" in texts[0]
    assert "retrying in 0.2 s (attempt 2 of 3" in texts[1]
    assert "giving up after 3 attempts" in texts[2]
    assert all(r.exc_info is None for r in lines)  # no tracebacks
    assert "Traceback" not in caplog.text


async def test_5xx_is_retried_with_one_line_then_answers(
    client: Client,
    store: ConversationStore,
    openai: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    openai.enqueue(Failure(503, "loading model"), Reply(text="ready now"))
    with caplog.at_level(logging.WARNING):
        response = await one_call(client, store)
    assert response.message.content[0].text == "ready now"
    texts = [r.getMessage() for r in model_lines(caplog)]
    assert len(texts) == 1 and "answered HTTP 503: loading model; retrying" in texts[0], texts
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (Failure(401, "Incorrect API key provided"), "HTTP 401): Incorrect API key provided"),
        (Failure(404, "model 'llama-test' not found"), "may not exist on the server"),
        (
            Failure(400, "Requested tokens (5000) exceed context window of 4096"),
            "does not fit the context window",
        ),
    ],
)
async def test_4xx_fails_at_once_with_the_servers_message(
    client: Client,
    store: ConversationStore,
    openai: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    failure: Failure,
    expected: str,
) -> None:
    openai.enqueue(failure, Reply(text="never asked for"))
    with caplog.at_level(logging.WARNING), pytest.raises(WorkflowFailureError) as caught:
        await one_call(client, store)
    error = failure_of(caught)
    assert error.type == MODEL_ERROR_NON_RETRYABLE and error.non_retryable
    assert failure.message in str(error) and expected in str(error)
    assert len(openai.requests) == 1  # not retried
    texts = [r.getMessage() for r in model_lines(caplog)]
    assert len(texts) == 1 and "not retried" in texts[0], texts
    assert "Traceback" not in caplog.text


async def test_cancelling_a_turn_closes_its_long_unstreamed_call_in_seconds(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Reply(text="much too late", delay_s=120))
    config = SessionConfig(model="openai:llama-test?stream=false")
    session = f"s-oai-cancel-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        await keel.prompt(session, "write a long essay", config=config)
        deadline = time.monotonic() + 20
        while not openai.requests:  # the call is at the server, which sits on it
            assert time.monotonic() < deadline, "the model call never reached the server"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # a couple of heartbeats into the call
        cancelled_at = time.monotonic()
        await keel.cancel(session, "stop it")
        record = await keel.wait_turn(session, 1, timeout_s=10)
        turn_ended = time.monotonic() - cancelled_at
        deadline = time.monotonic() + 10
        while not openai.disconnects:
            assert time.monotonic() < deadline, "the connection stayed open after the cancel"
            await asyncio.sleep(0.05)
        closed = openai.disconnects[0].at - cancelled_at
    stopped = time.monotonic() - cancelled_at  # the worker has shut down too
    assert record.status == "cancelled" and record.error == "stop it"
    assert turn_ended < 3, turn_ended
    assert closed < 4, closed  # the next heartbeat learns of the cancel, then the socket shuts
    assert stopped < 10, stopped
    assert len(openai.requests) == 1
