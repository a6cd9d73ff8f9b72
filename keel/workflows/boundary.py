"""The input boundary (security invariant S3): what may enter a session from outside.

Prompts may carry only user content. Imported history is normalised so that no toolUse is
left without a toolResult, and none of its toolUse blocks is ever executed: the workflow
only runs tool uses that its own model activity returned (S1).

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Sequence

from keel.workflows.limits import InputRejected, check_prompt_size
from keel.workflows.messages import ContentBlock, Message, error_result

__all__ = ["InputRejected", "normalise_history", "prompt_bytes", "validate_prompt"]

PROMPT_BLOCK_KINDS = frozenset({"text", "image", "document"})
# The limit sessions started before ``keel.workflows.limits`` held their start prompt to.
EARLIER_PROMPT_BYTES = 1_000_000
NOT_EXECUTED = "tool was not executed: this tool use came from imported history"


def validate_prompt(
    role: str, content: Sequence[ContentBlock], *, earlier_limit: bool = False
) -> None:
    """Check that a prompt carries only user content, within the limits.

    Args:
        role: the role the sender claimed; only ``user`` is accepted.
        content: the prompt's content blocks.
        earlier_limit: hold it to ``EARLIER_PROMPT_BYTES`` only (a session replaying a
            start input from before ``keel.workflows.limits``), not to ``PROMPT_BYTES`` and
            ``PROMPT_BLOCKS``.

    Raises:
        InputRejected: naming the first thing that is not allowed.
    """
    if role != "user":
        raise InputRejected(f"a prompt must have role 'user', not {role!r}")
    if not content:
        raise InputRejected("a prompt needs at least one content block")
    for i, block in enumerate(content):
        kind = block.kind
        if kind not in PROMPT_BLOCK_KINDS:
            raise InputRejected(
                f"prompt block {i} is a {kind} block; a prompt may carry only "
                f"{', '.join(sorted(PROMPT_BLOCK_KINDS))} blocks"
            )
        if kind == "text" and not (block.text or "").strip():
            raise InputRejected(f"prompt block {i} is empty text")
    if not earlier_limit:
        check_prompt_size(len(content), prompt_bytes(content))
        return
    size = sum(len(block.model_dump_json()) for block in content)
    if size > EARLIER_PROMPT_BYTES:
        raise InputRejected(
            f"prompt is {size:,} bytes, over the limit of {EARLIER_PROMPT_BYTES:,} bytes"
        )


def prompt_bytes(content: Sequence[ContentBlock]) -> int:
    """The size of a prompt's content as JSON, in bytes (``limits.PROMPT_BYTES``)."""
    return sum(len(block.model_dump_json().encode()) for block in content)


def merge_roles(messages: Sequence[Message]) -> list[Message]:
    """Merge consecutive messages of one role, as Converse needs roles to alternate."""
    merged: list[Message] = []
    for msg in messages:
        if merged and merged[-1].role == msg.role:
            merged[-1] = Message(role=msg.role, content=[*merged[-1].content, *msg.content])
        else:
            merged.append(msg)
    return merged


def normalise_history(messages: Sequence[Message]) -> list[Message]:
    """Normalise an imported conversation.

    Consecutive messages of one role are merged (Converse needs alternating roles). A toolUse
    without a toolResult in the next message gets an error toolResult saying it was not
    executed; a trailing assistant message with tool uses gets a user message holding those
    results, so the next cycle calls the model instead of running anything.

    Args:
        messages: the conversation as imported.

    Returns:
        A new list of messages; the input is not changed.

    Raises:
        InputRejected: on orphan toolResults, misplaced blocks, duplicate toolUseIds or an
            assistant first message.
    """
    merged = merge_roles([m.model_copy(deep=True) for m in messages])
    if merged and merged[0].role != "user":
        raise InputRejected("imported history must start with a user message")

    seen_ids: set[str] = set()
    out: list[Message] = []
    open_uses: list[str] = []  # toolUseIds of the previous assistant message
    for index, msg in enumerate(merged):
        if msg.role == "assistant":
            if open_uses:  # pragma: no cover - roles alternate after merging
                raise AssertionError("unreachable")
            for block in msg.content:
                if block.toolResult is not None:
                    raise InputRejected(f"message {index}: an assistant message holds a toolResult")
                if block.toolUse is not None:
                    use_id = block.toolUse.toolUseId
                    if use_id in seen_ids:
                        raise InputRejected(f"message {index}: duplicate toolUseId {use_id!r}")
                    seen_ids.add(use_id)
                    open_uses.append(use_id)
            out.append(msg)
            continue
        answered: list[str] = []
        for block in msg.content:
            if block.toolUse is not None:
                raise InputRejected(f"message {index}: a user message holds a toolUse")
            if block.toolResult is not None:
                use_id = block.toolResult.toolUseId
                if use_id not in open_uses or use_id in answered:
                    raise InputRejected(
                        f"message {index}: orphan toolResult {use_id!r} answers no toolUse "
                        "of the message before it"
                    )
                answered.append(use_id)
        missing = [_not_executed(u) for u in open_uses if u not in answered]
        out.append(Message(role="user", content=[*missing, *msg.content]))
        open_uses = []
    if open_uses:
        out.append(Message(role="user", content=[_not_executed(u) for u in open_uses]))
    return out


def _not_executed(tool_use_id: str) -> ContentBlock:
    return ContentBlock(toolResult=error_result(tool_use_id, NOT_EXECUTED))
