"""The model activity ``keel.model.converse``: one model call, any provider."""

from __future__ import annotations

import functools

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import run_in_thread_with_heartbeat
from activities.models import ModelError, resolve_model
from workflows.contracts import ModelRequest, ModelResponse
from workflows.policies import MODEL_ACTIVITY, MODEL_ERROR_NON_RETRYABLE


@activity.defn(name=MODEL_ACTIVITY)
async def converse(request: ModelRequest) -> ModelResponse:
    """Call the session's model with the conversation and tool specs.

    Args:
        request: the conversation, system prompt, tools and model spec.

    Returns:
        The assistant message, stop reason and token usage.

    Raises:
        ApplicationError: non-retryable, for failures retrying cannot fix.
    """
    try:
        provider = resolve_model(request.model)
        response = await run_in_thread_with_heartbeat(functools.partial(provider.converse, request))
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
