"""Pure steps of one agent cycle: what to do with a model response.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from keel.workflows.activity_options import MODEL_ACTIVITY
from keel.workflows.messages import (
    ContentBlock,
    Message,
    ToolResult,
    ToolUse,
    error_result,
    text_block,
    tool_uses,
)

# Stop reasons that end a turn normally.
COMPLETING_STOP_REASONS = frozenset(
    {"end_turn", "stop_sequence", "guardrail_intervened", "content_filtered"}
)


def max_tokens_error(cut_tool_uses: int) -> str:
    """A turn's error when the model stopped at max_tokens, naming the tool uses not run.

    Args:
        cut_tool_uses: how many toolUse blocks the cut-off reply held (none were run).
    """
    said = "the model reached its max_tokens limit before finishing its reply"
    if cut_tool_uses:
        said += f"; its {cut_tool_uses} tool use(s), possibly incomplete, were not run"
    return said


def close_unexecuted(message: Message, why: str) -> Message:
    """Replace every toolUse block by a text block saying it was not run (S5).

    Args:
        message: an assistant message whose tool uses will not run.
        why: the reason, added to each replacement text.

    Returns:
        A copy of the message without toolUse blocks; unchanged when it had none.
    """
    if not tool_uses(message):
        return message
    content: list[ContentBlock] = []
    for block in message.content:
        if block.toolUse is None:
            content.append(block)
        else:
            content.append(text_block(f"[tool use {block.toolUse.name!r} was not run: {why}]"))
    return Message(role=message.role, content=content)


def id_conflicts(uses: Iterable[ToolUse], used: AbstractSet[str]) -> list[str]:
    """ToolUseIds that repeat within a response or collide with ids already used.

    Args:
        uses: the tool uses of a new model response.
        used: every toolUseId of the conversation so far.
    """
    seen: set[str] = set()
    conflicts: list[str] = []
    for use in uses:
        if use.toolUseId in seen or use.toolUseId in used:
            conflicts.append(use.toolUseId)
        seen.add(use.toolUseId)
    return conflicts


def results_message(uses: Iterable[ToolUse], results: Mapping[str, ToolResult]) -> Message:
    """The user message holding one toolResult per tool use, in tool-use order.

    A tool use without a result gets an error result, so nothing dangles.
    """
    content = [
        ContentBlock(toolResult=results[u.toolUseId])
        if u.toolUseId in results
        else ContentBlock(toolResult=error_result(u.toolUseId, "tool produced no result"))
        for u in uses
    ]
    return Message(role="user", content=content)


def stripped(result: ToolResult) -> ToolResult:
    """A stored toolResult as the workflow keeps it: without its content (read by digest)."""
    if not result.content:
        return result
    return result.model_copy(update={"content": []})


def text_of(message: Message | None) -> str:
    """The text blocks of a message, joined by newlines."""
    if message is None:
        return ""
    return "\n".join(b.text for b in message.content if b.text is not None)


def failure_text(err: BaseException) -> str:
    """The innermost message of an activity failure chain."""
    while isinstance(err, ActivityError) and err.cause is not None:
        err = err.cause
    return str(err) or type(err).__name__


def turn_error(err: ActivityError, model_retry_s: float | None) -> str:
    """A failed turn's error, in one line: what went wrong, without Keel's error type names.

    ``failure_text``, but a failure of Keel's own type (``KeelModelTransientError``, ...) is
    its message alone, and a model call that ran out of ``model_retry_s`` says so.
    """
    timed_out = model_timed_out(err, model_retry_s)
    if timed_out is not None:
        return timed_out
    inner: BaseException = err
    while isinstance(inner, ActivityError) and inner.cause is not None:
        inner = inner.cause
    if isinstance(inner, ApplicationError) and (inner.type or "").startswith("Keel"):
        return inner.message or failure_text(err)
    return failure_text(err)


def model_timed_out(err: ActivityError, retry_s: float | None) -> str | None:
    """A turn's error when its model call ran out of ``SessionConfig.model_retry_s``, else None.

    Temporal ends the call at its schedule-to-close timeout: while an attempt runs (a
    ``TimeoutError``, its cause the last attempt's failure when there was one), or when the
    next retry would come after it (the last failure, retry state ``TIMEOUT``). One line: how
    long, and the last error.
    """
    cause = err.cause
    timed_out = isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_CLOSE
    if err.activity_type != MODEL_ACTIVITY or retry_s is None:
        return None
    if not (timed_out or err.retry_state == RetryState.TIMEOUT):
        return None
    last = cause.cause if timed_out and isinstance(cause, TimeoutError) else cause
    said = f"; last error: {failure_text(last)}" if last is not None else ""
    return f"the model did not answer within {retry_s:g} s, retries included (model_retry_s){said}"
