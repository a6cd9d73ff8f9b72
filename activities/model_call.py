"""The model activity ``keel.model.converse``: one model call, any provider."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.models import ModelError, resolve_model
from workflows.contracts import ModelRequest, ModelResponse
from workflows.policies import MODEL_ACTIVITY, MODEL_ERROR_NON_RETRYABLE

HEARTBEAT_EVERY_S = 1.0
# Heartbeat details carry the tail of the text streamed so far, for watchers (`keel watch`):
# they live in the activity's pending state on the server, never in workflow history.
STREAM_TAIL_CHARS = 4000
# Once a stream has started, this long without any output means it is stuck: the attempt
# fails (retryably) instead of waiting for the start-to-close timeout.
STREAM_STALL_S = 90.0


class _Progress:
    """What a provider's stream has delivered so far; written by the provider's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.text_chars = 0
        self.events = 0
        self.last_at: float | None = None
        self._tail = ""

    def __call__(self, delta: str) -> None:
        with self._lock:
            self.text_chars += len(delta)
            self.events += 1
            self.last_at = time.monotonic()
            if delta:
                self._tail = (self._tail + delta)[-STREAM_TAIL_CHARS:]

    def details(self) -> dict[str, object]:
        """Heartbeat details: how much arrived, and the tail of the text."""
        with self._lock:
            return {"text_chars": self.text_chars, "events": self.events, "text": self._tail}

    def stalled_for(self) -> float:
        """Seconds since the last output, 0 before the stream started."""
        with self._lock:
            return 0.0 if self.last_at is None else time.monotonic() - self.last_at


@activity.defn(name=MODEL_ACTIVITY)
async def converse(request: ModelRequest) -> ModelResponse:
    """Call the session's model with the conversation and tool specs.

    The provider runs in a thread; this coroutine heartbeats (with how much output has
    arrived) so Temporal notices a dead worker, and fails the attempt when a started stream
    stalls.

    Args:
        request: the conversation, system prompt, tools and model spec.

    Returns:
        The assistant message, stop reason and token usage.

    Raises:
        ApplicationError: non-retryable for failures retrying cannot fix (``ModelError``);
            retryable for a stalled stream. Other provider exceptions propagate and are
            retried by Temporal.
    """
    progress = _Progress()
    try:
        provider = resolve_model(request.model)
        call = functools.partial(provider.converse, request, progress)
        task = asyncio.ensure_future(asyncio.to_thread(call))
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_S)
            if done:
                response = task.result()
                break
            if progress.stalled_for() > STREAM_STALL_S:
                raise ApplicationError(
                    f"model stream stalled: no output for {STREAM_STALL_S:g} s",
                    type="KeelModelStreamStalled",
                )
            activity.heartbeat(progress.details())
    except ModelError as err:
        raise ApplicationError(
            str(err), type=MODEL_ERROR_NON_RETRYABLE, non_retryable=True
        ) from err
    if response.message.role != "assistant":
        raise ApplicationError(
            f"model {request.model!r} answered with role {response.message.role!r}",
            type=MODEL_ERROR_NON_RETRYABLE,
            non_retryable=True,
        )
    activity.logger.info(
        "model %s answered turn %s cycle %s: %s",
        request.model,
        request.turn,
        request.cycle,
        response.stopReason,
    )
    return response
