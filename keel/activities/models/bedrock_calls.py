"""Bedrock's Converse API through boto3: the calls, and what their errors mean.

The wire shapes (the request's arguments, the stream's events) are in
``keel.activities.models.bedrock_wire``.

The ``bedrock:`` provider (``keel.activities.models.bedrock``) calls ``converse`` here; this
module imports boto3, so it is imported by the first Bedrock call, in its thread.

Credentials, region and endpoint come from the standard AWS configuration chain (profiles,
environment, instance roles; ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` is honoured by boto3 itself).
boto3's own retries are off: Temporal retries the model activity. Failures that retrying
cannot fix raise ``ModelError``; transient ones raise ``RetryableModelError``, with the delay
Bedrock asks for (a ``Retry-After`` header on throttling), when it gives one.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import boto3  # type: ignore[import-untyped]
import urllib3.exceptions
from botocore import eventstream  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    ResponseStreamingError,
)

from keel.activities.models.base import DeltaCallback, ModelError
from keel.activities.models.bedrock_wire import (
    RetryableModelError,
    StreamAssembler,
    build_request,
    output_block,
    token_usage,
)
from keel.activities.models.retry_after import retry_after_s
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.messages import ContentBlock, Message

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
# Per socket read: a non-streaming Converse answers only once the whole reply is generated.
READ_TIMEOUT_S = 300.0

# total_max_attempts=1 means one attempt and no retry by botocore (its ``max_attempts`` key
# counts retries, not attempts: max_attempts=1 would still retry once).
CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1, "mode": "standard"},
    connect_timeout=CONNECT_TIMEOUT_S,
    read_timeout=READ_TIMEOUT_S,
)

CREDENTIALS_MESSAGE = (
    "no AWS credentials found for bedrock: configure a profile, "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or an instance role"
)

# Error codes (HTTP ``x-amzn-errortype`` or stream ``:exception-type``, first letter upper-cased)
# that a later attempt may not meet.
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
        "ModelStreamErrorException",
        "ModelErrorException",
    }
)
CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "ExpiredTokenException",
        "ExpiredToken",
        "InvalidSignatureException",
        "IncompleteSignature",
        "MissingAuthenticationTokenException",
        "InvalidClientTokenId",
    }
)
CONTEXT_OVERFLOW_HINTS = (
    "input is too long",
    "too many tokens",
    "too many input tokens",
    "prompt is too long",
    "context window",
    "context length",
    "maximum context",
)

# connection-level failures: the request may not have reached Bedrock, or its answer was cut
_TRANSIENT: tuple[type[Exception], ...] = (
    HTTPClientError,
    ResponseStreamingError,
    urllib3.exceptions.HTTPError,
    eventstream.ParserError,
)
_BOTO_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError, *_TRANSIENT)

_clients: dict[str | None, Any] = {}
_no_stream: set[tuple[str | None, str]] = set()
_clients_lock = threading.Lock()


def reset_client_cache() -> None:
    """Forget the cached boto3 clients and the models found not to stream (for tests)."""
    with _clients_lock:
        _clients.clear()
        _no_stream.clear()


def _client(region: str | None) -> Any:
    """The process's ``bedrock-runtime`` client for a region (None: the configured one)."""
    with _clients_lock:
        client = _clients.get(region)
        if client is None:
            session = boto3.session.Session()
            client = session.client("bedrock-runtime", region_name=region, config=CLIENT_CONFIG)
            _clients[region] = client
        return client


def converse(
    model_id: str,
    stream: bool,
    region: str | None,
    request: ModelRequest,
    on_delta: DeltaCallback,
) -> ModelResponse:
    """Send the conversation to Bedrock and assemble the assistant's answer.

    Args:
        model_id: Bedrock's ``modelId``.
        stream: whether to call ``ConverseStream`` (it falls back to ``Converse``, for the
            rest of the process, when the model does not stream).
        region: the region to call; None: the configured one.
        request: conversation, system prompt, tool specs, inference config.
        on_delta: called with each text delta, and with "" for other stream events.

    Raises:
        ModelError: a failure that retrying cannot fix (bad request, context window
            exceeded, unknown model, access denied, missing credentials or region).
        RetryableModelError: a transient failure (throttling, server error, timeout,
            broken stream).
    """
    kwargs = build_request(model_id, request)
    try:
        client = _client(region)
        key = (region, model_id)
        if stream and key not in _no_stream:
            try:
                return _converse_stream(model_id, client, kwargs, on_delta)
            except ClientError as err:
                if not _streaming_unsupported(err):
                    raise
                logger.info(
                    "bedrock model %s does not stream (%s); using Converse",
                    model_id,
                    _error_text(err),
                )
                with _clients_lock:
                    _no_stream.add(key)
        return _converse(client, kwargs, on_delta)
    except _BOTO_ERRORS as err:
        raise classify_error(model_id, err) from err


def _converse_stream(
    model_id: str, client: Any, kwargs: dict[str, Any], on_delta: DeltaCallback
) -> ModelResponse:
    response = client.converse_stream(**kwargs)
    events = response["stream"]
    assembler = StreamAssembler()
    try:
        for event in events:
            assembler.feed(event, on_delta)
    finally:
        events.close()
    return assembler.result(model_id)


def _converse(client: Any, kwargs: dict[str, Any], on_delta: DeltaCallback) -> ModelResponse:
    response = client.converse(**kwargs)
    raw = response.get("output", {}).get("message", {}).get("content", [])
    content: list[ContentBlock] = []
    for block in raw:
        converted = output_block(block)
        if converted is None:
            on_delta("")
            continue
        on_delta(converted.text or "")
        content.append(converted)
    return ModelResponse(
        message=Message(role="assistant", content=content),
        stopReason=response.get("stopReason") or "end_turn",
        usage=token_usage(response.get("usage")),
    )


def _error_code(err: ClientError) -> str:
    code = str(err.response.get("Error", {}).get("Code") or "")
    return code[:1].upper() + code[1:]


def _error_text(err: ClientError) -> str:
    message = err.response.get("Error", {}).get("Message") or ""
    return f"{_error_code(err) or 'error'}: {message}" if message else _error_code(err)


def _retry_after(err: ClientError) -> float | None:
    """The delay a ``Retry-After`` header of Bedrock's error answer asks for, if any."""
    headers = err.response.get("ResponseMetadata", {}).get("HTTPHeaders") or {}
    return retry_after_s(headers.get("retry-after"))


def _streaming_unsupported(err: ClientError) -> bool:
    if _error_code(err) != "ValidationException":
        return False
    message = str(err.response.get("Error", {}).get("Message") or "").lower()
    unsupported = any(
        s in message for s in ("unsupported", "not support", "doesn't support", "does not support")
    )
    return "stream" in message and unsupported


def classify_error(model_id: str, err: Exception) -> Exception:
    """The exception to raise for a boto3/botocore failure of a Bedrock call.

    Args:
        model_id: the model called, named in the message.
        err: what boto3 raised.

    Returns:
        ``RetryableModelError`` for transient failures, ``ModelError`` for the rest.
    """
    name = f"bedrock model {model_id!r}"
    if isinstance(err, ClientError):
        code, text = _error_code(err), _error_text(err)
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in RETRYABLE_CODES:
            return RetryableModelError(f"{name}: {text}", retry_after_s=_retry_after(err))
        if code == "ValidationException":
            if any(hint in text.lower() for hint in CONTEXT_OVERFLOW_HINTS):
                return ModelError(
                    f"{name}: the conversation exceeds the model's context window ({text})"
                )
            return ModelError(f"{name} rejected the request: {text}")
        if code == "AccessDeniedException":
            return ModelError(
                f"{name}: access denied ({text}); check IAM permissions and model access"
            )
        if code == "ResourceNotFoundException":
            return ModelError(f"{name}: unknown or unavailable model ({text})")
        if code in CREDENTIAL_CODES:
            return ModelError(f"{name}: AWS rejected the credentials ({text})")
        if isinstance(status, int) and (status >= 500 or status == 429):
            return RetryableModelError(
                f"{name}: HTTP {status} {text}", retry_after_s=_retry_after(err)
            )
        return ModelError(f"{name}: {text or type(err).__name__}")
    if isinstance(err, NoCredentialsError):
        return ModelError(f"{CREDENTIALS_MESSAGE} (model {model_id!r})")
    if isinstance(err, NoRegionError):
        return ModelError(
            f"{name}: no AWS region configured: set AWS_REGION or AWS_DEFAULT_REGION, a "
            "profile region, or use bedrock:<model-id>?region=<aws-region>"
        )
    if isinstance(err, ParamValidationError):
        return ModelError(f"{name}: invalid request: {err}")
    if isinstance(err, _TRANSIENT):
        return RetryableModelError(
            f"{name}: the connection failed or broke mid-response ({type(err).__name__}: {err})"
        )
    # other botocore errors: credential providers, profiles, configuration
    return ModelError(f"{name}: {type(err).__name__}: {err}")


__all__ = [
    "CREDENTIALS_MESSAGE",
    "classify_error",
    "converse",
    "reset_client_cache",
]
