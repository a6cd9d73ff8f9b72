"""Pure steps of one agent cycle: what to do with a model response.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from temporalio.exceptions import ActivityError

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
MAX_TOKENS_ERROR = (
    "the model reached its max_tokens limit before finishing; incomplete tool uses were "
    "dropped, not run"
)


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
