"""Cost in dollars (issue 44): priced calls, the worker's price table, unknown stays unknown,
and sub-agents' spend rolled up into their parent's and bounded by its budget."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from keel import KeelClient, SubAgent
from keel.workflows.budget_contracts import ModelPrice
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history

PRICE = ModelPrice(input=3, output=15)
# respond(tokens=10): 10 in, 10 out; at $3 / $15 per million: $0.00018 a call
CALL = (10 * 3 + 10 * 15) / 1_000_000


def sid() -> str:
    return f"cost-{uuid.uuid4().hex[:10]}"


def two_calls() -> list[dict[str, Any]]:
    return [respond(tool_use("e1", "echo", text="hi"), stop="tool_use"), respond(text("done"))]


async def test_the_sessions_price_prices_each_call(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    session = sid()
    async with run_worker():
        record = await keel.run(session, "go", config=script(two_calls(), price=PRICE))
        state = await keel.state(session)
    assert record.status == "completed", record
    assert record.cost_usd == pytest.approx(2 * CALL) and not record.cost_unknown
    assert state.cost_usd == pytest.approx(2 * CALL) and not state.cost_unknown
    called = [e.detail.get("cost_usd") for e in state.events if e.type == "model_called"]
    assert called == [pytest.approx(CALL), pytest.approx(CALL)]


async def test_the_workers_price_table_prices_a_session_without_one(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[prices]\n"scripted:*" = { input = 1, output = 2 }\n'
        '"bedrock:anthropic.claude*" = { input = 3, output = 15 }\n'
    )
    monkeypatch.setenv("KEEL_PRICES", str(prices))
    session = sid()
    async with run_worker():
        record = await keel.run(session, "go", config=script(two_calls()))
        other = sid()  # the session's own price wins over the table
        own = await keel.run(other, "go", config=script(two_calls(), price=PRICE))
    assert record.cost_usd == pytest.approx(2 * (10 * 1 + 10 * 2) / 1_000_000), record
    assert own.cost_usd == pytest.approx(2 * CALL)


async def test_without_a_price_or_with_unknown_usage_the_cost_is_unknown(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    unreported = respond(text("done"))
    unreported["usage"] = {"unknown": True}  # a server that reports no usage
    priced_but_unreported = script(
        [respond(tool_use("e1", "echo", text="hi"), stop="tool_use"), unreported], price=PRICE
    )
    async with run_worker():
        unpriced = await keel.run(sid(), "go", config=script(two_calls()))
        session = sid()
        partial = await keel.run(session, "go", config=priced_but_unreported)
        state = await keel.state(session)
    assert unpriced.cost_usd is None and unpriced.cost_unknown, unpriced  # never 0
    # the first call is known, the second is not: at least the first's cost
    assert partial.cost_usd == pytest.approx(CALL) and partial.cost_unknown, partial
    assert state.cost_usd == pytest.approx(CALL) and state.cost_unknown
    called = [e.detail.get("cost_usd") for e in state.events if e.type == "model_called"]
    assert called == [pytest.approx(CALL), None]


async def test_a_sub_agents_spend_is_in_its_parents_totals_and_listed_apart(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    researcher = script(
        [respond(text("fact: cats purr"), tokens=100)], price=ModelPrice(input=1, output=1)
    )
    parent = script(
        [
            respond(tool_use("r1", "researcher", prompt="find a fact"), stop="tool_use"),
            respond(text("all done")),
        ],
        price=PRICE,
        agents={"researcher": SubAgent(description="Finds facts.", config=researcher)},
    )
    # replay runs a history under its file's name: the recorded parent must have that id
    recording = os.environ.get("KEEL_RECORD_HISTORIES") == "1"
    session = "sub_agent_spend" if recording else sid()
    async with run_worker():
        record = await keel.run(session, "research", config=parent)
        state = await keel.state(session)
        child = await keel.state(f"{session}/researcher-r1")
    await save_history(keel.client, session, "sub_agent_spend")
    child_cost = 200 / 1_000_000
    assert child.cost_usd == pytest.approx(child_cost)
    assert record.status == "completed", record
    assert record.usage.totalTokens == 2 * 20 + 200
    assert record.cost_usd == pytest.approx(2 * CALL + child_cost) and not record.cost_unknown
    assert state.usage.totalTokens == 240 and state.cost_usd == pytest.approx(2 * CALL + child_cost)
    spent = state.sub_agents["researcher"]
    assert spent.usage.totalTokens == 200 and spent.cost_usd == pytest.approx(child_cost)
    assert record.sub_agents["researcher"] == spent


async def test_a_sub_agent_is_bounded_by_what_its_parent_has_left(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    researcher = script([respond(text("fact"), tokens=5)])  # the same price as its parent
    parent = script(
        [
            respond(tool_use("r1", "researcher", prompt="find a fact"), stop="tool_use", tokens=50),
            respond(text("all done")),
        ],
        price=PRICE,
        max_session_tokens=1_000,
        max_turn_cost_usd=0.01,
        agents={"researcher": SubAgent(description="Finds facts.", config=researcher)},
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "research", config=parent)
        child = await keel.state(f"{session}/researcher-r1")
    assert record.status == "completed", record
    first_call = (50 * 3 + 50 * 15) / 1_000_000
    # the parent had 900 tokens and $0.01 less its first call left when the child started
    assert child.config.max_session_tokens == 900 and child.config.max_turn_tokens == 900
    assert child.config.max_session_cost_usd == pytest.approx(0.01 - first_call)
    assert child.config.max_turn_cost_usd == pytest.approx(0.01 - first_call)


async def test_a_parent_with_nothing_left_starts_no_sub_agent(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    researcher = script([respond(text("fact"))])
    parent = script(
        [respond(tool_use("r1", "researcher", prompt="find"), stop="tool_use", tokens=30)],
        max_turn_tokens=50,
        on_budget="fail",
        agents={"researcher": SubAgent(description="Finds facts.", config=researcher)},
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "research", config=parent)
        state = await keel.state(session)
    assert record.status == "failed", record  # on_budget="fail": the cap ends the turn
    results = [b.toolResult for m in state.messages for b in m.content if b.toolResult is not None]
    assert "sub-agent not started" in (results[0].content[0].text or "")
    assert "token budget is spent" in (results[0].content[0].text or "")
    assert not state.sub_agents
