"""The model's sliding window never splits a tool use from its result."""

from __future__ import annotations

from typing import Any

import pytest

from keel import Message
from keel.activities.context_window import context_window


def msg(role: str, *content: dict[str, Any]) -> Message:
    return Message.model_validate({"role": role, "content": list(content)})


def use(i: int) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": f"u{i}", "name": "echo", "input": {}}}


def result(i: int) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": f"u{i}", "content": [{"text": "ok"}]}}


def tool_loop(cycles: int) -> list[Message]:
    out = [msg("user", {"text": "task"})]
    for i in range(cycles):
        out += [msg("assistant", use(i)), msg("user", result(i))]
    return out


def paired(window: list[Message]) -> bool:
    open_ids: set[str] = set()
    for m in window:
        for b in m.content:
            if b.toolResult is not None and b.toolResult.toolUseId not in open_ids:
                return False
            if b.toolUse is not None:
                open_ids.add(b.toolUse.toolUseId)
    return True


@pytest.mark.parametrize("limit", [2, 3, 4, 5, 8, 20])
def test_a_long_tool_loop_keeps_the_task_and_whole_pairs(limit: int) -> None:
    history = tool_loop(10)
    window = context_window(history, limit)
    assert window[0] == history[0]  # the task stays
    assert window[-1] == history[-1]
    assert len(window) <= limit + 1
    assert paired(window)
    assert [m.role for m in window] == ["user", "assistant"] * (len(window) // 2) + ["user"] * (
        len(window) % 2
    )


def test_window_starts_at_a_plain_user_message_when_there_is_one() -> None:
    history = [
        *tool_loop(3),
        msg("assistant", {"text": "done"}),
        msg("user", {"text": "next task"}),
        msg("assistant", use(9)),
        msg("user", result(9)),
    ]
    window = context_window(history, 4)
    assert window == history[-3:]


def test_no_limit_or_short_history_is_unchanged() -> None:
    history = tool_loop(2)
    assert context_window(history, None) == history
    assert context_window(history, 10) == history
