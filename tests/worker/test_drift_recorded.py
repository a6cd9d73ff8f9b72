"""Drift in ``keel deploy check`` (issue 43), without a server: recorded histories in, drift out.

``read_recorded`` takes what a session was offered and did from the history the check
fetched (``tests/histories``: a first run, a continued run carrying its ledger, an imported
conversation); ``DriftCheck`` compares it with the tools loaded here. A history whose recorded
tools and inputs are hostile (huge, nested past any recursion limit, no JSON Schema at all)
comes out as drift lines, never as an exception.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory

from keel import open_store
from keel.activities.tools import load_tool_modules
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.drift import DriftCheck, Recorded, read_recorded
from keel.worker.process.replay_check import SessionCheck, _recorded, _with_drift
from keel.workflows.contracts import SessionConfig

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
FAULT_TOOLS = "tests.fault_tools"
SAMPLE_TOOLS = "tests.sample_tools"


def history(name: str, edit: Any = None) -> WorkflowHistory:
    """A recorded history; ``edit(kind, value)`` may rewrite each decoded payload."""
    raw = json.loads((HISTORIES / f"{name}.json").read_text())
    if edit is not None:
        types: dict[str, str] = {}
        for event in raw["events"]:
            scheduled = event.get("activityTaskScheduledEventAttributes")
            if scheduled:
                types[event["eventId"]] = scheduled["activityType"]["name"]
            completed = event.get("activityTaskCompletedEventAttributes")
            if completed and types.get(completed["scheduledEventId"]) == "keel.model.converse":
                payload = completed["result"]["payloads"][0]
                value = json.loads(base64.b64decode(payload["data"]))
                payload["data"] = base64.b64encode(json.dumps(edit(value)).encode()).decode()
    return WorkflowHistory.from_json("drift", raw)


async def recorded_of(name: str, edit: Any = None) -> Recorded:
    return await read_recorded(history(name, edit), DATA_CONVERTER)


async def test_a_first_run_records_its_config_tools_and_calls() -> None:
    recorded = await recorded_of("effect_recorded")
    assert recorded.config is not None and recorded.config["tool_modules"] == [FAULT_TOOLS]
    assert recorded.tools["refund"]["effect"] == "write"
    assert recorded.tools["lookup"]["module"] == FAULT_TOOLS
    assert recorded.tools_digest is not None
    assert [name for name, _ in recorded.uses.values()] == ["refund"]
    modules = load_tool_modules([FAULT_TOOLS])
    assert await DriftCheck(modules=modules).drift_of(recorded) == []  # the same code


async def test_a_continued_run_reads_the_carried_ledger() -> None:
    recorded = await recorded_of("approval_across_continue_as_new-run2")
    assert "guarded_record" in recorded.tools and recorded.tools_digest is not None
    assert ("guarded_record", recorded.uses["g1"][1]) == recorded.uses["g1"]
    # recorded when sample_tools' tools were all ``write``: most are ``read`` now
    drift = await DriftCheck(modules=load_tool_modules([SAMPLE_TOOLS])).drift_of(recorded)
    kinds = {(d.kind, d.tool) for d in drift}
    assert ("effect_changed", "echo") in kinds and ("effect_changed", "record") not in kinds
    assert all(d.level == "drift" for d in drift)


async def test_an_imported_conversation_counts_its_tool_uses() -> None:
    recorded = await recorded_of("imported_trailing_tool_use")
    assert recorded.uses["evil"][0] == "record"


async def test_a_tool_of_a_module_not_loaded_is_module_missing_not_removed() -> None:
    recorded = await recorded_of("effect_recorded")
    load_tool_modules([SAMPLE_TOOLS])
    drift = await DriftCheck(modules=[SAMPLE_TOOLS]).drift_of(recorded)
    # every fault tool is still registered in this process: nothing is missing
    assert [d for d in drift if d.kind == "tool_removed"] == []

    def renamed(value: dict[str, Any]) -> dict[str, Any]:
        for spec in value.get("tools") or []:
            spec["name"] = "gone_" + spec["name"]
        return value

    gone = await recorded_of("effect_recorded", renamed)
    drift = await DriftCheck(modules=[SAMPLE_TOOLS]).drift_of(gone)
    assert [d.kind for d in drift] == ["module_missing"]
    assert "tests.fault_tools" in drift[0].detail and "give it to --tools" in drift[0].detail
    drift = await DriftCheck(modules=[FAULT_TOOLS]).drift_of(gone)
    assert {d.kind for d in drift} == {"tool_removed"}
    assert len(drift) == len(gone.tools)


async def test_hostile_recorded_tools_and_inputs_give_drift_not_a_crash(tmp_path: Path) -> None:
    load_tool_modules([FAULT_TOOLS])
    store = open_store(str(tmp_path / "store"))
    nested: Any = "x"
    for _ in range(100):  # deeper, and the history's payload does not decode: below
        nested = {"a": nested}
    hostile_specs = [
        {"name": "refund", "description": 5, "inputSchema": "not a schema"},
        {"name": "lookup", "inputSchema": {"type": 42, "properties": [1, 2]}},
        "not a spec",
        {"name": ["no"]},
    ]
    digest = store.put_document(hostile_specs)

    def hostile(value: dict[str, Any]) -> dict[str, Any]:
        value["tools_digest"] = digest
        if value.get("tools"):
            value["tools"] = [
                *value["tools"],
                {"name": "n" * 100_000, "module": FAULT_TOOLS, "effect": {"x": 1}},
                {"name": "refund", "module": FAULT_TOOLS, "effect": ["write"] * 10_000},
                {"name": 7, "module": None},
                "junk",
            ]
            value["message"]["content"] = [
                {"toolUse": {"toolUseId": "h1", "name": "refund", "input": "z" * 2_000_000}},
                {"toolUse": {"toolUseId": "h2", "name": "lookup", "input": nested}},
                {"toolUse": {"toolUseId": "h3", "name": "lookup", "input": [1] * 100_000}},
                {"toolUse": "junk"},
                "junk",
            ]
        return value

    recorded = await recorded_of("effect_recorded", hostile)
    agent = SessionConfig(model="scripted:x.json", system="new prompt")
    drift = await DriftCheck(modules=[FAULT_TOOLS], agent=agent, store=store).drift_of(recorded)
    kinds = {(d.kind, d.tool) for d in drift}
    assert ("tool_removed", "n" * 79 + "…") in kinds  # names are cut short
    assert ("effect_changed", "refund") in kinds
    assert ("input_rejected", "refund") in kinds and ("input_rejected", "lookup") in kinds
    assert ("schema_changed", "refund") in kinds and ("description_changed", "refund") in kinds
    assert ("system_changed", None) in kinds
    assert all(len(d.detail) <= 400 for d in drift), [len(d.detail) for d in drift]


async def test_a_payload_too_deep_to_decode_is_unreadable_drift() -> None:
    deep: Any = "x"
    for _ in range(900):
        deep = [deep]

    def too_deep(value: dict[str, Any]) -> dict[str, Any]:
        value["message"]["content"] = [{"toolUse": {"toolUseId": "d", "name": "x", "input": deep}}]
        return value

    recorded = await _recorded(history("effect_recorded", too_deep), DATA_CONVERTER)
    assert isinstance(recorded, str) and "recursion limit" in recorded
    check = await _with_drift(SessionCheck("s", "r", "ok"), recorded, DriftCheck())
    assert [(d.kind, d.level) for d in check.drift] == [("unreadable", "drift")]
    assert check.drifted


async def test_an_agent_file_s_system_prompt_and_settings_are_compared() -> None:
    recorded = await recorded_of("effect_recorded")
    assert recorded.config is not None
    same = SessionConfig(model=recorded.config["model"], tool_modules=[FAULT_TOOLS])
    assert await DriftCheck(agent=same).drift_of(recorded) == []
    other = SessionConfig(model="scripted:other.json", system="Be terse.")
    drift = await DriftCheck(agent=other, agent_name="support.toml").drift_of(recorded)
    assert [(d.kind, d.level) for d in drift] == [
        ("system_changed", "drift"),
        ("agent_changed", "info"),
    ]
    assert "no system prompt" in drift[0].detail and "support.toml has 9 characters" in (
        drift[0].detail
    )
    assert drift[1].detail == "settings differ from support.toml: model"
    recorded.child = True  # a sub-agent's session: its settings are its parent's file's
    assert await DriftCheck(agent=other).drift_of(recorded) == []
