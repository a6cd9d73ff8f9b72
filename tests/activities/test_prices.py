"""The worker's price table and the arithmetic of cost (issue 44): no I/O but a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from keel.activities.prices import PriceTable, PriceTableError
from keel.worker.settings import ConfigError, Settings
from keel.workflows.budget_contracts import ModelPrice
from keel.workflows.cost import Spend, add_cost, call_cost, cost_text, dollars
from keel.workflows.messages import TokenUsage


def test_an_exact_spec_wins_then_the_longest_pattern() -> None:
    table = PriceTable.of(
        {
            "bedrock:anthropic.claude-3-5-sonnet*": {"input": 3, "output": 15},
            "bedrock:*": {"input": 1, "output": 1},
            "openai:llama3.1": {"input": 0, "output": 0},
        }
    )
    assert table.price("bedrock:anthropic.claude-3-5-sonnet-20240620-v1:0") == ModelPrice(
        input=3, output=15
    )
    assert table.price("bedrock:amazon.nova-pro-v1:0") == ModelPrice(input=1, output=1)
    assert table.price("openai:llama3.1?context_tokens=4096") == ModelPrice(input=0, output=0)
    assert table.price("openai:qwen3") is None


def test_a_bad_table_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="'openai:x'.*input"):
        PriceTable.of({"openai:x": {"input": -1, "output": 2}})
    missing = tmp_path / "none.toml"
    missing.write_text("[other]\n")
    with pytest.raises(ConfigError, match=r"KEEL_PRICES: .*no \[prices\] table"):
        Settings.from_env({"KEEL_PRICES": str(missing)}).prices()
    assert len(Settings.from_env({}).prices()) == 0


def test_a_cost_is_known_only_with_a_price_and_reported_usage() -> None:
    usage = TokenUsage(inputTokens=1_000, outputTokens=100, totalTokens=1_100)
    assert call_cost(ModelPrice(input=3, output=15), usage) == pytest.approx(0.0045)
    assert call_cost(None, usage) is None
    assert call_cost(ModelPrice(input=3, output=15), TokenUsage(unknown=True)) is None
    assert call_cost(ModelPrice(input=0, output=0), usage) == 0.0  # a free model is known


def test_a_sum_keeps_the_known_part_and_says_what_is_unknown() -> None:
    assert add_cost(None, False, 0.5) == (0.5, False)
    assert add_cost(0.5, False, None) == (0.5, True)
    assert add_cost(None, False, None) == (None, True)
    both = Spend(cost_usd=0.5) + Spend(cost_unknown=True, usage=TokenUsage(unknown=True))
    assert both.cost_usd == 0.5 and both.cost_unknown and both.usage.unknown
    assert cost_text(None, True) == "cost unknown"
    assert cost_text(0.5, True) == "at least $0.5000"
    assert cost_text(12.3456, False) == "$12.35"
    assert dollars(0.000018) == "$0.000018"
