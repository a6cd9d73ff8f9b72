"""A conversation that outgrows the model: trimmed token-aware, and asked again once (issue 31).

The provider here is a probe that says "context too long" (``ContextTooLong``, as the OpenAI
client raises for a server's answer) while the conversation it is shown is longer than its
window; ``ModelActivities.converse`` runs in temporalio's ``ActivityEnvironment``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from keel import ContentBlock, Message, TokenUsage, ToolResult, ToolUse, open_store, text_block
from keel.activities.context_window import estimate_tokens, fit_tokens
from keel.activities.model_call import ModelActivities
from keel.activities.models import PROVIDERS, ContextTooLong, DeltaCallback
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.messages import ToolResultContent

SEEN: list[list[Message]] = []


class SmallModel:
    """Answers while the view is under ``window`` tokens (by Keel's estimate); else says so.

    ``context_tokens=N`` in its spec (``small:N``) declares the window, as the OpenAI client's
    spec option does; ``small:`` declares none.
    """

    window = 600

    def __init__(self, spec: str, environ: object = None) -> None:
        self.context_tokens: int | None = int(spec) if spec else None

    async def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        SEEN.append(list(request.messages))
        if estimate_tokens(request.messages) > self.window:
            raise ContextTooLong("this model's maximum context length is 600 tokens")
        return ModelResponse(
            message=Message(role="assistant", content=[text_block("fits")]),
            stopReason="end_turn",
            usage=TokenUsage(inputTokens=1, outputTokens=1),
        )


@pytest.fixture(autouse=True)
def small(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(PROVIDERS, "small", SmallModel)  # type: ignore[arg-type]
    SEEN.clear()
    yield
    SEEN.clear()


def long_loop(cycles: int, size: int = 400) -> list[Message]:
    """The task, then ``cycles`` tool uses each with a large result."""
    messages = [Message(role="user", content=[text_block("the task: count the files")])]
    for i in range(cycles):
        use = ToolUse(toolUseId=f"t{i}", name="list_files", input={"page": i})
        result = ToolResult(toolUseId=f"t{i}", content=[ToolResultContent(text="f" * size)])
        messages.append(Message(role="assistant", content=[ContentBlock(toolUse=use)]))
        messages.append(Message(role="user", content=[ContentBlock(toolResult=result)]))
    return messages


def answered(view: list[Message]) -> None:
    """Every toolResult in the view has its toolUse in the message before it; roles alternate."""
    for i, message in enumerate(view):
        for block in message.content:
            if block.toolResult is not None:
                uses = [b.toolUse.toolUseId for b in view[i - 1].content if b.toolUse]
                assert block.toolResult.toolUseId in uses
    roles = [m.role for m in view]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles


def test_fit_tokens_keeps_the_task_and_whole_pairs() -> None:
    messages = long_loop(10)
    view = fit_tokens(messages, 400)
    assert view[0] == messages[0]  # the task
    assert view[-1] == messages[-1]  # the latest result
    assert estimate_tokens(view) <= 400 < estimate_tokens(messages)
    answered(view)
    assert fit_tokens(messages, 10**6) == messages


def request(model: str, messages: list[Message]) -> ModelRequest:
    return ModelRequest(session_id="s", turn=1, cycle=1, model=model, messages=messages)


async def test_too_long_is_trimmed_and_asked_again_once(tmp_path: Any) -> None:
    activities = ModelActivities(open_store(str(tmp_path / "store")))
    messages = long_loop(12)
    response = await ActivityEnvironment().run(activities.converse, request("small:", messages))
    assert response.message.content[0].text == "fits"
    assert len(SEEN) == 2  # the whole conversation, refused; then the trimmed view
    first, second = SEEN
    assert len(first) == len(messages) and len(second) < len(first)
    assert second[0].content[0].text == "the task: count the files"
    answered(second)


async def test_a_declared_window_trims_before_asking(tmp_path: Any) -> None:
    activities = ModelActivities(open_store(str(tmp_path / "store")))
    response = await ActivityEnvironment().run(
        activities.converse, request("small:800", long_loop(12))
    )
    assert response.message.content[0].text == "fits"
    assert len(SEEN) == 1 and estimate_tokens(SEEN[0]) <= 600


async def test_what_cannot_shrink_fails_with_the_servers_words(tmp_path: Any) -> None:
    activities = ModelActivities(open_store(str(tmp_path / "store")))
    one = [Message(role="user", content=[text_block("x" * 5000)])]
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(activities.converse, request("small:", one))
    assert caught.value.non_retryable
    assert "maximum context length" in str(caught.value)
