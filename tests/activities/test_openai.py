"""The openai provider against a scripted local chat-completions server."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from activities.models import resolve_model
from activities.models.base import ModelError
from activities.models.openai import OpenAIProvider, OpenAITransientError
from tests.fakes.openai_server import (
    CHAT_PATH,
    Failure,
    FakeOpenAIServer,
    Reply,
    StreamError,
    ToolCall,
)
from workflows.activity_contracts import ModelRequest, ModelResponse
from workflows.contracts import InferenceConfig, ToolSpec
from workflows.messages import Message

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake server, with OPENAI_BASE_URL pointing at it and no API key."""
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server


def request(*messages: dict[str, Any], **fields: Any) -> ModelRequest:
    fields.setdefault("messages", [Message.model_validate(m) for m in messages] or [user("hi")])
    fields.setdefault("turn", 1)
    fields.setdefault("cycle", 1)
    return ModelRequest(session_id="s-1", model="openai:llama-test", **fields)


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
    response = OpenAIProvider(spec).converse(req or request(), deltas)
    return response, deltas


# ----------------------------------------------------------------------------- spec and setup


def test_spec_resolves_and_reads_environment_at_creation(
    openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = resolve_model("openai:llama3.2:3b?timeout=5")
    assert isinstance(provider, OpenAIProvider)
    assert provider.model == "llama3.2:3b" and provider.timeout_s == 5.0 and provider.stream
    assert provider.url == f"{openai.base_url}/chat/completions"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid:1/v1/")
    assert OpenAIProvider("m").base_url == "http://example.invalid:1/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIProvider("m").base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    "spec", ["", "?stream=false", "m?stream=maybe", "m?colour=red", "m?timeout=0"]
)
def test_bad_specs_are_model_errors(spec: str) -> None:
    with pytest.raises(ModelError):
        OpenAIProvider(spec)


def test_bad_base_url_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:11434")
    with pytest.raises(ModelError, match="OPENAI_BASE_URL"):
        OpenAIProvider("m")


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
    assert response.stopReason == "end_turn" and response.usage.totalTokens == 0


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
    with pytest.raises(OpenAITransientError, match="will retry") as caught:
        OpenAIProvider("llama-test").converse(request(), deltas)
    assert not isinstance(caught.value, ModelError)
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
    with pytest.raises(OpenAITransientError, match="cannot reach the server") as caught:
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
    from activities.models.openai import _error_message

    assert _error_message(json.dumps({"error": "model not loaded"}).encode()) == "model not loaded"
    assert _error_message(json.dumps({"detail": "bad field"}).encode()) == "bad field"
    assert _error_message(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
