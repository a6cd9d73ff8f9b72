"""Cost on the command line (issue 44): --price, the worker's KEEL_PRICES, and what
``keel show``, ``keel sessions`` and ``keel watch`` print."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.helpers.cli import keel, keel_worker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

# respond(tokens=10): 10 in, 10 out a call; at 3:15, $0.00018 a call; at 1:2, $0.00003
CALL = (10 * 3 + 10 * 15) / 1_000_000
TABLE_CALL = (10 * 1 + 10 * 2) / 1_000_000


def two_calls(tmp_path: Path) -> str:
    return write_script(
        tmp_path / f"s-{uuid.uuid4().hex[:6]}.json",
        [respond(tool_use("t1", "add", a=2, b=3), stop="tool_use"), respond(text("5"))],
    )


def test_show_sessions_and_watch_print_the_cost(server_env: dict[str, str], tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices]\n"scripted:*" = { input = 1, output = 2 }\n')
    priced, tabled = f"cost-{uuid.uuid4().hex[:8]}", f"cost-{uuid.uuid4().hex[:8]}"
    with keel_worker({**server_env, "KEEL_PRICES": str(prices)}, SAMPLE_TOOLS):
        for session, price in ((priced, ["--price", "3:15"]), (tabled, [])):
            model = two_calls(tmp_path)
            args = ["run", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS]
            done = keel(*args, *price, "add", env=server_env)
            assert done.returncode == 0, done.stderr

        human = keel("show", priced, env=server_env)
        assert "[turn 1 completed: 2 model calls, 20 in / 20 out tokens, $0.0004]" in human.stdout
        assert "[idle; 40 tokens: 20 in / 20 out, $0.0004]" in human.stdout

        shown = json.loads(keel("show", priced, "--json", env=server_env).stdout)
        assert shown["cost_usd"] == pytest.approx(2 * CALL) and shown["cost_unknown"] is False
        assert shown["turns"][0]["cost_usd"] == pytest.approx(2 * CALL)

        listed = keel("sessions", "--json", env=server_env)
        assert listed.returncode == 0, listed.stderr
        costs = {s["session"]: s["cost_usd"] for s in json.loads(listed.stdout)}
        assert costs[priced] == pytest.approx(2 * CALL)
        assert costs[tabled] == pytest.approx(2 * TABLE_CALL)  # the worker's price table
        table = keel("sessions", env=server_env).stdout
        assert "COST" in table.splitlines()[0]
        assert any(priced in line and "$0.0004" in line for line in table.splitlines())

        watched = keel("watch", priced, "--until-idle", env=server_env)
        assert watched.returncode == 0, watched.stderr
        calls = [line for line in watched.stdout.splitlines() if "model_called" in line]
        assert len(calls) == 2 and all(line.endswith(", $0.0002") for line in calls), calls


def test_a_bad_price_exits_2_naming_the_flag_or_key(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    model = two_calls(tmp_path)
    for value in ("3", "x:15", "-1:15", "3:inf"):
        done = keel("run", "--model", model, "--price", value, "hi", env=server_env)
        assert done.returncode == 2, (value, done.stderr)
        assert "--price" in done.stderr, done.stderr
    agent = tmp_path / "agent.toml"
    agent.write_text(f'model = "{model}"\nprice = {{input = 3}}\n')
    done = keel("run", "--agent", str(agent), "hi", env=server_env)
    assert done.returncode == 2 and "price.output" in done.stderr, done.stderr


def test_a_worker_with_a_bad_price_table_exits_2(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices]\n"scripted:*" = { input = -1, output = 2 }\n')
    done = keel("worker", "--prices", str(prices), env=server_env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "KEEL_PRICES" in done.stderr and "scripted:*" in done.stderr, done.stderr
