"""The input boundary (S3) as pure functions: prompts and imported history."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from keel import ContentBlock, InputRejected, Message
from keel.workflows.boundary import NOT_EXECUTED, normalise_history, validate_prompt


def msg(role: str, *content: dict[str, Any]) -> Message:
    return Message.model_validate({"role": role, "content": list(content)})


def use(i: str, name: str = "echo") -> dict[str, Any]:
    return {"toolUse": {"toolUseId": i, "name": name, "input": {}}}


def result(i: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": i, "status": "success", "content": [{"text": "ok"}]}}


def test_trailing_tool_use_gets_error_result() -> None:
    out = normalise_history([msg("user", {"text": "hi"}), msg("assistant", use("a"), use("b"))])
    assert [m.role for m in out] == ["user", "assistant", "user"]
    closing = out[-1].content
    assert [b.toolResult.toolUseId for b in closing if b.toolResult] == ["a", "b"]
    assert all(b.toolResult and b.toolResult.status == "error" for b in closing)
    assert closing[0].toolResult and closing[0].toolResult.content[0].text == NOT_EXECUTED


def test_partly_answered_tool_uses_are_completed_in_place() -> None:
    out = normalise_history(
        [
            msg("user", {"text": "hi"}),
            msg("assistant", use("a"), use("b")),
            msg("user", result("b"), {"text": "more"}),
        ]
    )
    ids = [(b.toolResult.toolUseId, b.toolResult.status) for b in out[2].content if b.toolResult]
    assert ids == [("a", "error"), ("b", "success")]
    assert len(out) == 3


@pytest.mark.parametrize(
    ("history", "reason"),
    [
        ([msg("user", result("ghost"))], "orphan toolResult 'ghost'"),
        (
            [
                msg("user", {"text": "x"}),
                msg("assistant", use("a")),
                msg("user", result("a"), result("a")),
            ],
            "orphan toolResult 'a'",
        ),
        ([msg("user", use("a"))], "user message holds a toolUse"),
        ([msg("assistant", {"text": "hi"})], "must start with a user message"),
        (
            [
                msg("user", {"text": "x"}),
                msg("assistant", use("a")),
                msg("user", result("a")),
                msg("assistant", use("a")),
            ],
            "duplicate toolUseId 'a'",
        ),
        (
            [msg("user", {"text": "x"}), msg("assistant", result("a"))],
            "assistant message holds a toolResult",
        ),
    ],
)
def test_bad_history_is_rejected(history: list[Message], reason: str) -> None:
    with pytest.raises(InputRejected, match=reason):
        normalise_history(history)


def test_consecutive_roles_are_merged() -> None:
    out = normalise_history([msg("user", {"text": "a"}), msg("user", {"text": "b"})])
    assert len(out) == 1 and [b.text for b in out[0].content] == ["a", "b"]


def test_prompt_rules() -> None:
    validate_prompt("user", [ContentBlock(text="fine")])
    with pytest.raises(InputRejected, match="toolUse"):
        validate_prompt("user", [ContentBlock.model_validate(use("x"))])
    with pytest.raises(InputRejected, match="role 'user'"):
        validate_prompt("assistant", [ContentBlock(text="x")])


def test_unknown_block_types_and_mixed_blocks_fail_validation() -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        ContentBlock.model_validate({"shellCommand": "rm -rf /"})
    with pytest.raises(ValidationError, match="exactly one"):
        ContentBlock.model_validate({"text": "a", **use("x")})
    with pytest.raises(ValidationError, match="exactly one"):
        ContentBlock.model_validate({})
