"""What the model sees of a long conversation: a sliding window of whole exchanges.

A view for one model call, never a change to stored history.
"""

from __future__ import annotations

from collections.abc import Sequence

from keel.workflows.messages import Message


def _opens_exchange(message: Message) -> bool:
    """A user message that answers no tool use: a place a window may start."""
    return message.role == "user" and not any(b.toolResult for b in message.content)


def context_window(messages: Sequence[Message], limit: int | None) -> list[Message]:
    """About the last ``limit`` messages, never splitting a tool use from its result.

    At most ``limit + 1`` messages: the task may come on top of the last ``limit``.

    The window starts at a user message that holds no toolResult. When the last ``limit``
    messages hold none (one long tool loop), the window is the conversation's first message
    (the task) followed by the latest whole tool-use / tool-result pairs, so roles still
    alternate and every toolResult keeps its toolUse.

    Args:
        messages: the whole conversation.
        limit: the most messages to show (at least 2); None shows everything.
    """
    if limit is None or len(messages) <= limit:
        return list(messages)
    start = len(messages) - limit
    for index in range(start, len(messages)):
        if _opens_exchange(messages[index]):
            return list(messages[index:])
    first = messages[0]
    for index in range(start, len(messages)):
        if messages[index].role == "assistant":
            return [first, *messages[index:]]
    return list(messages)  # pragma: no cover - a limit of at least 2 always finds a start
