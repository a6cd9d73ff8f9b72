"""The bedrock provider alone: real boto3 against a local fake Bedrock Runtime."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keel import InferenceConfig, Message
from keel.activities.models import ModelError, resolve_model
from keel.activities.models.bedrock import BedrockProvider
from keel.activities.models.bedrock_calls import CREDENTIALS_MESSAGE, _client
from keel.activities.models.bedrock_wire import RetryableModelError
from keel.workflows.activity_contracts import ModelRequest
from keel.workflows.contracts import ToolSpec
from tests.fakes.bedrock_server import (
    FakeBedrock,
    HttpError,
    Outcome,
    Reply,
    StreamCut,
    StreamError,
    fake_bedrock_env,
)
from tests.helpers.scripts import text, tool_use

MODEL = "anthropic.claude-test:0"
ECHO = ToolSpec(
    name="echo",
    description="Return the given text unchanged.",
    inputSchema={"type": "object", "properties": {"text": {"type": "string"}}},
)


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    with fake_bedrock_env(monkeypatch, tmp_path) as server:
        yield server


def request(messages: list[dict[str, Any]] | None = None, **fields: Any) -> ModelRequest:
    raw = messages or [{"role": "user", "content": [text("hi")]}]
    return ModelRequest(
        session_id="s-1",
        turn=1,
        cycle=1,
        model=f"bedrock:{MODEL}",
        messages=[Message.model_validate(m) for m in raw],
        **fields,
    )


def call(spec: str = MODEL, req: ModelRequest | None = None) -> tuple[Any, list[str]]:
    deltas: list[str] = []
    response = BedrockProvider(spec).converse(req or request(), deltas.append)
    return response, deltas


def test_request_carries_exactly_the_converse_fields(bedrock: FakeBedrock) -> None:
    png = b"\x89PNG\r\n\x1a\nraw-bytes"
    redacted = b"\x00opaque"
    history = [
        {
            "role": "user",
            "content": [
                text("look"),
                {"image": {"format": "png", "source": {"bytes": base64.b64encode(png).decode()}}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                # bytes in a free-form dict come back from workflow history as base64 text
                {"reasoningContent": {"redactedContent": base64.b64encode(redacted).decode()}},
                tool_use("t1", "echo", text="a"),
            ],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"json": {"ok": 1}}]}}],
        },
    ]
    bedrock.script(Reply([text("fine")]))
    call(
        req=request(
            history,
            system="be brief",
            tools=[ECHO],
            inference=InferenceConfig(maxTokens=100, temperature=0.5),
        )
    )
    [seen] = bedrock.requests
    assert seen.path == "/model/anthropic.claude-test%3A0/converse-stream"
    assert seen.model_id == MODEL
    assert seen.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/us-east-1/bedrock/" in seen.headers["authorization"]
    body = seen.body
    assert set(body) == {"messages", "system", "toolConfig", "inferenceConfig"}
    assert body["system"] == [{"text": "be brief"}]
    assert body["inferenceConfig"] == {"maxTokens": 100, "temperature": 0.5}
    assert body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "echo",
                    "description": "Return the given text unchanged.",
                    "inputSchema": {"json": ECHO.inputSchema},
                }
            }
        ]
    }
    user, assistant, results = body["messages"]
    # raw bytes went to boto3, which base64-encoded them once
    assert user == {
        "role": "user",
        "content": [
            {"text": "look"},
            {"image": {"format": "png", "source": {"bytes": base64.b64encode(png).decode()}}},
        ],
    }
    assert assistant["content"][0] == {
        "reasoningContent": {"redactedContent": base64.b64encode(redacted).decode()}
    }
    assert assistant["content"][1] == tool_use("t1", "echo", text="a")
    assert results == {
        "role": "user",
        "content": [
            {
                "toolResult": {
                    "toolUseId": "t1",
                    "status": "success",
                    "content": [{"json": {"ok": 1}}],
                }
            }
        ],
    }


def test_request_without_optional_fields_sends_only_messages(bedrock: FakeBedrock) -> None:
    bedrock.script(Reply([text("fine")]))
    call(req=request(inference=InferenceConfig()))
    [seen] = bedrock.requests
    assert seen.body == {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}


def test_stream_is_assembled_into_one_message(bedrock: FakeBedrock) -> None:
    reasoning = {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}}
    bedrock.script(
        Reply(
            [reasoning, text("let me echo that"), tool_use("t1", "echo", text="hi", n=[1, 2])],
            stop_reason="tool_use",
            usage={"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
        )
    )
    response, deltas = call()
    assert response.stopReason == "tool_use"
    assert response.usage.model_dump() == {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}
    dumped = [b.model_dump(mode="json") for b in response.message.content]
    assert dumped == [
        reasoning,
        {"text": "let me echo that"},
        tool_use("t1", "echo", text="hi", n=[1, 2]),
    ]
    assert response.message.role == "assistant"
    texts = [d for d in deltas if d]
    assert len(texts) >= 2 and "".join(texts) == "let me echo that"
    assert "" in deltas  # tool-input chunks and other events report progress without text


def test_converse_without_streaming(bedrock: FakeBedrock) -> None:
    bedrock.script(Reply([text("plain"), tool_use("t9", "echo", text="x")], stop_reason="tool_use"))
    response, deltas = call(f"{MODEL}?stream=false")
    assert [r.operation for r in bedrock.requests] == ["converse"]
    assert response.stopReason == "tool_use"
    assert [b.model_dump(mode="json") for b in response.message.content] == [
        {"text": "plain"},
        tool_use("t9", "echo", text="x"),
    ]
    assert response.usage.totalTokens == 15
    assert "plain" in deltas


def test_falls_back_to_converse_when_the_model_does_not_stream(bedrock: FakeBedrock) -> None:
    bedrock.script(
        HttpError(400, "ValidationException", "The model is unsupported for streaming."),
        Reply([text("one")]),
        Reply([text("two")]),
    )
    first, _ = call()
    second, _ = call()
    assert [first.message.content[0].text, second.message.content[0].text] == ["one", "two"]
    # the second call knows the model does not stream
    assert [r.operation for r in bedrock.requests] == ["converse-stream", "converse", "converse"]


def test_incomplete_tool_input_at_max_tokens_becomes_empty(bedrock: FakeBedrock) -> None:
    partial = {"toolUse": {"toolUseId": "cut", "name": "echo", "input": '{"text": "hal'}}
    bedrock.script(Reply([text("I will call"), partial], stop_reason="max_tokens"))
    response, _ = call()
    assert response.stopReason == "max_tokens"
    use = response.message.content[1].toolUse
    assert use is not None and use.toolUseId == "cut" and use.input == {}


ERRORS: list[tuple[str, Outcome, type[Exception], str]] = [
    (
        "throttling",
        HttpError(429, "ThrottlingException", "Too many requests, slow down."),
        RetryableModelError,
        "ThrottlingException: Too many requests, slow down.",
    ),
    (
        "internal",
        HttpError(500, "InternalServerException", "oops"),
        RetryableModelError,
        "InternalServerException: oops",
    ),
    ("bare 502", HttpError(502, "BadGateway", "upstream"), RetryableModelError, "HTTP 502"),
    (
        "unavailable",
        HttpError(503, "ServiceUnavailableException", "later"),
        RetryableModelError,
        "ServiceUnavailableException",
    ),
    (
        "model timeout",
        HttpError(408, "ModelTimeoutException", "took too long"),
        RetryableModelError,
        "ModelTimeoutException",
    ),
    (
        "validation",
        HttpError(400, "ValidationException", "messages.0.content: must not be empty"),
        ModelError,
        "rejected the request: ValidationException: messages.0.content: must not be empty",
    ),
    (
        "context overflow",
        HttpError(400, "ValidationException", "Input is too long for requested model."),
        ModelError,
        "the conversation exceeds the model's context window",
    ),
    (
        "too many tokens",
        HttpError(400, "ValidationException", "prompt has too many tokens: 250000 > 200000"),
        ModelError,
        "the conversation exceeds the model's context window",
    ),
    (
        "access denied",
        HttpError(403, "AccessDeniedException", "You don't have access to the model"),
        ModelError,
        "access denied (AccessDeniedException: You don't have access to the model)",
    ),
    (
        "unknown model",
        HttpError(404, "ResourceNotFoundException", "Model not found"),
        ModelError,
        "unknown or unavailable model (ResourceNotFoundException: Model not found)",
    ),
    (
        "bad credentials",
        HttpError(403, "UnrecognizedClientException", "The security token is invalid"),
        ModelError,
        "AWS rejected the credentials (UnrecognizedClientException",
    ),
    (
        "stream cut",
        StreamCut(Reply([text("a long answer")]), after_events=2),
        RetryableModelError,
        "broke mid-response",
    ),
    (
        "stream ends early",
        StreamCut(Reply([text("a long answer")]), after_events=3, clean=True),
        RetryableModelError,
        "ended before messageStop",
    ),
    (
        "error event",
        StreamError(Reply([text("a long answer")]), after_events=2),
        RetryableModelError,
        "ModelStreamErrorException: The model stream failed",
    ),
    (
        "throttling event",
        StreamError(Reply([text("x")]), 1, "throttlingException", "slow"),
        RetryableModelError,
        "ThrottlingException: slow",
    ),
    (
        "validation event",
        StreamError(Reply([text("x")]), 1, "validationException", "bad block"),
        ModelError,
        "ValidationException: bad block",
    ),
]


@pytest.mark.parametrize(
    ("outcome", "kind", "fragment"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_errors_are_classified(
    bedrock: FakeBedrock, outcome: Outcome, kind: type[Exception], fragment: str
) -> None:
    bedrock.script(outcome, Reply([text("never asked for")]))
    with pytest.raises(Exception) as caught:
        call()
    assert type(caught.value) is kind
    if kind is RetryableModelError:
        assert not isinstance(caught.value, ModelError)
    message = str(caught.value)
    assert fragment in message
    assert repr(MODEL) in message
    # boto3's own retries are off: Temporal decides whether to try again
    assert len(bedrock.requests) == 1


def test_missing_credentials(bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    bedrock.script(Reply([text("never")]))
    with pytest.raises(ModelError) as caught:
        call()
    assert str(caught.value).startswith(CREDENTIALS_MESSAGE)
    assert bedrock.requests == []


def test_missing_region(bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ModelError, match="no AWS region configured"):
        call()
    bedrock.script(Reply([text("west")]))
    response, _ = call(f"{MODEL}?region=us-west-2")
    assert response.message.content[0].text == "west"
    assert "/us-west-2/bedrock/" in bedrock.requests[0].headers["authorization"]


def test_specs(bedrock: FakeBedrock) -> None:
    provider = resolve_model(f"bedrock:{MODEL}?stream=false&region=eu-west-1")
    assert isinstance(provider, BedrockProvider)
    assert (provider.model_id, provider.stream, provider.region) == (MODEL, False, "eu-west-1")
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x"
    assert BedrockProvider(arn).model_id == arn
    with pytest.raises(ModelError, match="needs a model"):
        resolve_model("bedrock:")
    with pytest.raises(ModelError, match="bedrock has no option 'streaming'; its options"):
        BedrockProvider(f"{MODEL}?streaming=no")


def test_client_is_created_once_per_region(bedrock: FakeBedrock) -> None:
    assert _client(None) is _client(None)
    assert _client("eu-west-1") is not _client(None)
