"""A session's recording, turn by turn: prompts, tool calls with their results, answers.

A session's conversation is one list of messages; ``SessionState.prompt_at`` says where each
turn's prompt entered it (``Ledger.prompt_at``). Turn N is everything from its prompt to the
next turn's: the prompt's blocks, the assistant messages (their tool uses, each paired with
its toolResult), and the last assistant message's text as the turn's answer. What comes
before the first prompt is the session's imported history. A session recorded before Keel
kept ``prompt_at`` is split at each user message that holds no toolResult.

This is what ``keel export`` writes, and what ``keel replay`` answers tool calls from.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from keel.workflows.contracts import SessionState, TurnRecord
from keel.workflows.messages import ContentBlock, Message, TokenUsage, ToolResult, tool_uses
from keel.workflows.replay_contracts import RecordedCall


class RecordedTurn(BaseModel):
    """One turn of a recording.

    Attributes:
        turn: the turn's number in the recorded session.
        prompt: the prompt's content blocks.
        calls: the tool calls the model made in the turn, in order, each with the result
            it got (a call without a result, still running say, is left out).
        answer: the text of the turn's last assistant message.
        output: the turn's structured output, if it had one.
        status: how the turn ended (``completed``, ``failed`` ...), when still known.
        stop_reason: its stop reason, when still known.
        usage: its tokens, when still known (a long session keeps its recent turns' records).
    """

    model_config = ConfigDict(extra="forbid")

    turn: int
    prompt: list[ContentBlock]
    calls: list[RecordedCall] = Field(default_factory=list)
    answer: str = ""
    output: Any = None
    status: str | None = None
    stop_reason: str | None = None
    usage: TokenUsage | None = None


def recorded_turns(state: SessionState) -> tuple[list[Message], list[RecordedTurn]]:
    """Split a session's conversation into its imported history and its turns.

    Args:
        state: the session's state with its whole conversation (``KeelClient.state``).

    Returns:
        The messages before the first prompt (the imported history; a message the first
        prompt joined is cut before the prompt), and the turns in order.
    """
    messages = state.messages
    starts = _prompt_positions(state)
    records = {r.turn_id: r for r in state.turns}
    results = {
        b.toolResult.toolUseId: b.toolResult
        for m in messages
        if m.role == "user"
        for b in m.content
        if b.toolResult is not None
    }
    if not starts:
        return list(messages), []
    first_message, first_block = starts[0][1]
    imported = list(messages[:first_message])
    if first_block > 0:
        joined = messages[first_message]
        imported.append(Message(role="user", content=joined.content[:first_block]))
    turns = []
    for i, (turn, (at, block)) in enumerate(starts):
        end = starts[i + 1][1][0] if i + 1 < len(starts) else len(messages)
        turns.append(_turn(turn, messages, at, block, end, results, records.get(turn)))
    return imported, turns


def _prompt_positions(state: SessionState) -> list[tuple[int, tuple[int, int]]]:
    """Each turn's prompt position, by turn, in order; inferred for an older session."""
    count = len(state.messages)
    if state.prompt_at:
        return sorted((t, at) for t, at in state.prompt_at.items() if at[0] < count)
    positions: list[tuple[int, tuple[int, int]]] = []
    for index, message in enumerate(state.messages):
        if message.role == "user" and not any(b.toolResult for b in message.content):
            positions.append((len(positions) + 1, (index, 0)))
    return positions


def _turn(
    turn: int,
    messages: list[Message],
    at: int,
    block: int,
    end: int,
    results: dict[str, ToolResult],
    record: TurnRecord | None,
) -> RecordedTurn:
    """Turn ``turn``: its prompt at ``messages[at].content[block:]``, its messages to ``end``."""
    prompt = [b for b in messages[at].content[block:] if b.toolResult is None]
    calls: list[RecordedCall] = []
    answer = ""
    for message in messages[at + 1 : end]:
        if message.role != "assistant":
            continue
        answer = "\n".join(b.text for b in message.content if b.text is not None)
        for use in tool_uses(message):
            result = results.get(use.toolUseId)
            if result is not None:
                calls.append(RecordedCall(name=use.name, input=use.input, result=result))
    return RecordedTurn(
        turn=turn,
        prompt=prompt,
        calls=calls,
        answer=answer,
        output=record.output if record is not None else None,
        status=record.status if record is not None else None,
        stop_reason=record.stop_reason if record is not None else None,
        usage=record.usage if record is not None else None,
    )
