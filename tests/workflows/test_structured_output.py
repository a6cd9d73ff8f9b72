"""Structured output: a session with an output schema ends its turn with a valid final_result."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from keel import KeelClient, Message, RequestRejected
from keel.workflows.messages import tool_uses
from tests.helpers.cli import keel, keel_env
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import save_history

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


def sid() -> str:
    return f"so-{uuid.uuid4().hex[:10]}"


def answered(messages: list[Message]) -> None:
    """S5: every toolUse has its toolResult in the next message."""
    for i, msg in enumerate(messages):
        ids = [u.toolUseId for u in tool_uses(msg)]
        if ids:
            got = [b.toolResult.toolUseId for b in messages[i + 1].content if b.toolResult]
            assert got[: len(ids)] == ids


async def test_valid_at_once(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [respond(tool_use("f1", "final_result", city="Lyon", population=500000), stop="tool_use")],
        output_schema=SCHEMA,
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "facts about Lyon", config=config, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "structured_output_valid")
    assert record.status == "completed" and record.cycles == 1
    assert record.output == {"city": "Lyon", "population": 500000}
    assert [m.role for m in state.messages] == ["user", "assistant", "user"]
    answered(state.messages)
    result = state.messages[2].content[0].toolResult
    assert result is not None and result.status == "success"
    tools = {t["toolSpec"]["name"]: t for t in model_log()[0]["tools"]}
    assert tools["final_result"]["toolSpec"]["inputSchema"]["json"] == SCHEMA
    assert "echo" in tools


async def test_valid_after_a_retry(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(
                tool_use("f1", "final_result", city="Lyon", population="many"),
                tool_use("e1", "echo", text="side"),
                stop="tool_use",
            ),
            respond(tool_use("f2", "final_result", city="Lyon", population=5), stop="tool_use"),
        ],
        output_schema=SCHEMA,
    )
    session = sid()
    async with run_worker():
        record = await keel.run(session, "facts", config=config, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "completed" and record.cycles == 2
    assert record.output == {"city": "Lyon", "population": 5}
    answered(state.messages)
    results = {
        b.toolResult.toolUseId: b.toolResult for b in state.messages[2].content if b.toolResult
    }
    assert results["f1"].status == "error"
    assert "population: 'many' is not of type 'integer'" in (results["f1"].content[0].text or "")
    assert results["e1"].status == "success"  # other tools of the message still run
    second = model_log()[1]["messages"][2]["content"][0]["toolResult"]
    assert second["toolUseId"] == "f1" and second["status"] == "error"


async def test_never_valid_hits_the_budget(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    bad = [respond(tool_use(f"f{i}", "final_result", city=i), stop="tool_use") for i in range(3)]
    config = script(bad, output_schema=SCHEMA, max_cycles_per_turn=2, on_budget="fail")
    session = sid()
    async with run_worker():
        record = await keel.run(session, "facts", config=config, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "structured_output_budget")
    assert record.status == "failed" and record.stop_reason == "max_cycles"
    assert record.output is None
    answered(state.messages)


async def test_prose_instead_of_final_result_fails_after_reminders(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    """A model that answers in prose is told to call final_result; it never completes empty."""
    config = script([respond(text(f"prose {i}")) for i in range(3)], output_schema=SCHEMA)
    session = sid()
    async with run_worker():
        record = await keel.run(session, "facts", config=config, timeout_s=30)
        state = await keel.state(session)
    assert record.status == "failed" and record.stop_reason == "no_output", record
    assert record.output is None and record.reminders == 2
    assert "without a valid final_result call" in (record.error or "")
    roles = [m.role for m in state.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    reminder = state.messages[2].content[0].text or ""
    assert "final_result" in reminder
    assert len([r for r in model_log() if r["session"] == session]) == 3


async def test_a_reminder_brings_the_output(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(text("Lyon has about half a million people.")),
            respond(
                tool_use("f1", "final_result", city="Lyon", population=500000), stop="tool_use"
            ),
        ],
        output_schema=SCHEMA,
    )
    async with run_worker():
        record = await keel.run(sid(), "facts", config=config, timeout_s=30)
    assert record.status == "completed", record
    assert record.output == {"city": "Lyon", "population": 500000} and record.reminders == 1


async def test_invalid_schema_rejected_before_start(keel: KeelClient, script: Script) -> None:
    config = script([respond(text("x"))], output_schema={"type": "nonsense"})
    session = sid()
    with pytest.raises(RequestRejected, match="not a JSON Schema"):
        await keel.prompt(session, "hi", config=config)
    assert not await keel.exists(session)


def test_cli_output_and_bad_schema(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "m.json",
        [respond(tool_use("f1", "final_result", city="Oslo", population=7), stop="tool_use")],
    )
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    env = keel_env()
    out = keel(
        "run",
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "--output-schema",
        str(schema),
        "--json",
        "facts",
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["output"] == {"city": "Oslo", "population": 7}
    plain = write_script(tmp_path / "p.json", [respond(text("hi"))])
    out = keel("run", "--model", plain, "--json", "hi", env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["output"] is None
    schema.write_text(json.dumps({"type": 12}))
    out = keel("run", "--model", model, "--output-schema", str(schema), "hi", env=env, cwd=tmp_path)
    assert out.returncode == 2
    assert "--output-schema" in out.stderr and "not a JSON Schema" in out.stderr
    # checked before anything starts: a folder without Keel gets no server and no .keel/
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = keel(
        "run", "--model", model, "--output-schema", str(schema), "hi", env=env, cwd=elsewhere
    )
    assert out.returncode == 2, out.stderr
    assert "not a JSON Schema" in out.stderr
    assert not (elsewhere / ".keel").exists()
