"""A turn's default bounds, and the conversation a failed turn leaves for the next (issue 31)."""

from __future__ import annotations

import uuid
from typing import Any

from keel import KeelClient, SessionConfig
from keel.workflows.contracts import DEFAULT_MAX_CYCLES, DEFAULT_TURN_TOKENS
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use


def sid() -> str:
    return f"tb-{uuid.uuid4().hex[:10]}"


def test_a_session_is_bounded_by_default_and_may_lift_the_bounds() -> None:
    config = SessionConfig(model="scripted:x.json")
    assert config.max_cycles_per_turn == DEFAULT_MAX_CYCLES == 100
    assert config.max_turn_tokens == DEFAULT_TURN_TOKENS == 2_000_000
    free = SessionConfig(model="scripted:x.json", max_cycles_per_turn=None, max_turn_tokens=None)
    assert free.max_cycles_per_turn is None and free.max_turn_tokens is None


async def test_a_model_that_never_stops_calling_tools_stops_at_the_default(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    loop = [
        respond(tool_use(f"e{i}", "echo", text=str(i)), stop="tool_use", tokens=1)
        for i in range(DEFAULT_MAX_CYCLES + 5)
    ]
    session = sid()
    async with run_worker(max_cached_workflows=100):
        record = await keel.run(
            session, "loop", config=script(loop, on_budget="fail"), timeout_s=120
        )
    assert record.status == "failed" and record.stop_reason == "max_cycles", record
    assert record.cycles == DEFAULT_MAX_CYCLES
    assert len([r for r in model_log() if r["session"] == session]) == DEFAULT_MAX_CYCLES


async def test_the_turn_token_budget_ends_the_turn(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    loop = [
        respond(tool_use(f"e{i}", "echo", text="x"), stop="tool_use", tokens=40) for i in range(5)
    ]
    config = script(loop, max_turn_tokens=150, on_budget="fail")  # 80 a call: no third
    async with run_worker():
        record = await keel.run(sid(), "loop", config=config, timeout_s=30)
    assert record.status == "failed" and record.stop_reason == "token_budget", record
    assert record.cycles == 2 and "160 tokens of its budget of 150" in (record.error or "")


async def test_after_a_failed_turn_the_model_sees_alternating_roles(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    """The failed turn ends on a user message (tool results); the next prompt follows it.

    The next prompt's text joins that message (or, when it is already stored, follows it and
    the model's view merges the two): Converse and many OpenAI-compatible servers refuse two
    user messages in a row.
    """
    config = script(
        [respond(tool_use("e1", "echo", text="hi"), stop="tool_use"), respond(text("second"))],
        max_cycles_per_turn=1,
        on_budget="fail",
    )
    session = sid()
    async with run_worker():
        first = await keel.run(session, "first", config=config, timeout_s=30)
        second = await keel.run(session, "second", timeout_s=30)
        state = await keel.state(session)
    assert first.status == "failed" and first.stop_reason == "max_cycles"
    assert second.status == "completed", second
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    seen = [r for r in model_log() if r["session"] == session][-1]["messages"]
    roles = [m["role"] for m in seen]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles
    last = seen[-1]["content"]
    assert any("toolResult" in block for block in last)
    assert any(block.get("text") == "second" for block in last)
