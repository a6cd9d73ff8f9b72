"""What the model sees of a long conversation: a sliding window of whole exchanges.

A view for one model call, never a change to stored history.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from keel.workflows.messages import Message

# A rough count: about four characters of JSON a token, plus a few for the message's framing.
# Servers count with their own tokenizer; the trimmed view leaves room for that error.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


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


def estimate_tokens(messages: Sequence[Message]) -> int:
    """About how many tokens the messages take (``CHARS_PER_TOKEN``), never less than 1."""
    chars = sum(len(json.dumps(m.model_dump(mode="json", exclude_none=True))) for m in messages)
    return max(1, chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages))


def fit_tokens(messages: Sequence[Message], budget: int) -> list[Message]:
    """The latest whole exchanges that fit about ``budget`` tokens, after the task.

    The view is the conversation's first message (the task), then the latest messages from a
    point where no toolResult is cut from its toolUse (an assistant message, or a user
    message that answers no tool use; the model's view merges two user messages in a row).
    When nothing but the last exchange fits, the view is the task and that exchange.

    Args:
        messages: the whole conversation the model would see.
        budget: the tokens the view may take.
    """
    if len(messages) <= 2 or estimate_tokens(messages) <= budget:
        return list(messages)
    first = messages[0]
    best: list[Message] | None = None
    for index in range(len(messages) - 1, 0, -1):
        message = messages[index]
        if not (_opens_exchange(message) or message.role == "assistant"):
            continue  # a user message of tool results: its tool uses come before it
        view = [first, *messages[index:]]  # the model's view merges two user messages
        if best is not None and estimate_tokens(view) > budget:
            break
        best = view
    return best if best is not None else list(messages)
