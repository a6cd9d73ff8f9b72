"""Drift in ``keel deploy check`` (issue 43), on the dev server.

A worker (``keel worker``, in its own process) runs version 1 of a tool module; a session
calls three of its tools and parks on an approval of a fourth. Version 2 of the module, the
one ``keel deploy check --tools`` loads, removes a tool, tightens another's input schema,
changes a third's effect class and a fourth's description: each is reported on the session,
the replay still ``ok``; ``--strict`` makes the drift fail the check. A session of another
task queue is left out unless ``--all-task-queues``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel import ConversationStore, KeelClient, SessionConfig
from tests.helpers.cli import keel, keel_env, keel_worker
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use

V1 = '''
from keel import tool

@tool(effect="read")
def lookup(query: str) -> str:
    """Look a word up."""
    return "found " + query

@tool(effect="read")
def search(text: str, limit: int = 10) -> str:
    """Search the notes."""
    return f"{limit} hits for {text}"

@tool(effect="idempotent")
def refund(order: str) -> str:
    """Refund an order."""
    return "refunded " + order

@tool(requires_approval=True, effect="read")
def gate(why: str) -> str:
    """Ask before going on."""
    return "passed"
'''

V2 = '''
from keel import tool

@tool(effect="read")
def search(text: str, limit: int) -> str:
    """Search the notes."""
    return f"{limit} hits for {text}"

@tool(effect="write")
def refund(order: str) -> str:
    """Refund an order."""
    return "refunded " + order

@tool(requires_approval=True, effect="read")
def gate(why: str) -> str:
    """Ask a person before going on."""
    return "passed"
'''


def tool_files(tmp_path: Path) -> tuple[str, Path, Path]:
    """Versions 1 and 2 of one tool module: its name, and each file."""
    module = f"drift_tools_{uuid.uuid4().hex[:8]}"
    files = []
    for version, source in (("v1", V1), ("v2", V2)):
        folder = tmp_path / version
        folder.mkdir()
        (folder / f"{module}.py").write_text(source)
        files.append(folder / f"{module}.py")
    return module, files[0], files[1]


async def check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(keel, "deploy", "check", *args, env=env, timeout=120)


def by_session(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    return {s["session"]: s for s in report["sessions"]}


async def test_check_reports_a_removed_tool_a_tightened_schema_and_a_changed_effect(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    store: ConversationStore,
    script: Script,
    tmp_path: Path,
) -> None:
    module, v1, v2 = tool_files(tmp_path)
    address = temporal_env.client.service_client.config.target_host
    store_dir = str(tmp_path / "store")
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=task_queue, KEEL_STORE=store_dir)
    config = script(
        [
            respond(
                tool_use("l1", "lookup", query="tea"),
                tool_use("s1", "search", text="tea"),
                tool_use("r1", "refund", order="A-1"),
                tool_use("g1", "gate", why="check"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        tool_modules=[module],
    )
    keel_client = KeelClient(client, task_queue, store)
    session = f"drift-{uuid.uuid4().hex[:8]}"
    other_queue = f"{task_queue}-other"
    elsewhere = f"drift-elsewhere-{uuid.uuid4().hex[:8]}"
    try:
        with keel_worker(env, str(v1)):
            await keel_client.start(session, "go", config=config)
            record = await keel_client.wait_turn(session, 1, timeout_s=60)
            assert record.status == "awaiting_human", record
        # another task queue's session (no worker runs there): only its first task is due
        await KeelClient(client, other_queue, store).start(
            elsewhere, "hi", config=SessionConfig(model=config.model, tool_modules=[module])
        )
        ours = f'WorkflowId = "{session}" OR WorkflowId = "{elsewhere}"'

        # the same code: the session replays and nothing drifted
        same = await check(env, "--tools", str(v1), "--query", ours, "--json")
        assert same.returncode == 0, same.stdout + same.stderr
        report = by_session(same)
        assert list(report) == [session]  # the worker's task queue only (KEEL_TASK_QUEUE)
        assert report[session]["outcome"] == "ok" and report[session]["drift"] == []

        # version 2: drift, each kind named; the replay itself is still ok
        newer = await check(env, "--tools", str(v2), "--query", ours, "--json")
        assert newer.returncode == 0, newer.stdout + newer.stderr
        whole = json.loads(newer.stdout)
        assert whole["drifted"] == 1 and whole["task_queue"] == task_queue
        entry = by_session(newer)[session]
        assert entry["outcome"] == "ok"
        drift = {(d["kind"], d["tool"]): d for d in entry["drift"]}
        assert set(drift) == {
            ("tool_removed", "lookup"),
            ("input_rejected", "search"),
            ("schema_changed", "search"),
            ("effect_changed", "refund"),
            ("description_changed", "gate"),
        }, entry["drift"]
        assert "called 1 time(s)" in drift[("tool_removed", "lookup")]["detail"]
        rejected = drift[("input_rejected", "search")]["detail"]
        assert rejected.startswith("1 of 1 recorded input(s) rejected") and "limit" in rejected
        assert "now required limit" in drift[("schema_changed", "search")]["detail"]
        assert drift[("schema_changed", "search")]["level"] == "info"
        assert (
            "recorded idempotent, installed write" in drift[("effect_changed", "refund")]["detail"]
        )
        assert drift[("description_changed", "gate")]["level"] == "info"

        # the human report: the session's line, its drift lines, the summary
        human = await check(env, "--tools", str(v2), "--query", ours)
        assert human.returncode == 0, human.stdout + human.stderr
        lines = human.stdout.splitlines()
        assert lines[0] == f"ok      {session}"
        assert any(line.split()[:3] == ["drift", "tool_removed", "lookup:"] for line in lines), (
            lines
        )
        assert f"(task queue {task_queue})" in human.stdout
        assert "1 ok, 0 would break, 0 could not be checked; 1 drifted" in human.stdout
        assert f"drifted: {session}" in human.stdout

        strict = await check(env, "--tools", str(v2), "--query", ours, "--strict")
        assert strict.returncode == 1, strict.stdout + strict.stderr
        # the code the session ran passes --strict
        assert (await check(env, "--tools", str(v1), "--query", ours, "--strict")).returncode == 0

        # the other task queue's session: with --task-queue, or every queue
        there = await check(env, "--tools", str(v1), "--query", ours, "--task-queue", other_queue)
        assert f"ok      {elsewhere}" in there.stdout and session not in there.stdout
        every = await check(env, "--tools", str(v1), "--query", ours, "--all-task-queues")
        assert every.returncode == 0, every.stdout + every.stderr
        assert session in every.stdout and elsewhere in every.stdout
        assert "(every task queue)" in every.stdout
        # a Worker Deployment none of them ran in: nothing to check
        versioned = await check(env, "--query", ours, "--deployment", f"none-{uuid.uuid4().hex}")
        assert versioned.returncode == 0 and "checked 0 sessions" in versioned.stdout
        # without --tools, tools are not compared, and the user is told so
        bare = await check(env, "--query", ours, "--json")
        assert by_session(bare)[session]["drift"] == []
        assert "tool drift not checked" in bare.stderr
    finally:
        for workflow_id in (session, elsewhere):
            try:
                await client.get_workflow_handle(workflow_id).terminate("test over")
            except Exception:  # noqa: BLE001 - closed already
                pass


async def test_check_compares_the_agent_file_s_system_prompt(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    address = temporal_env.client.service_client.config.target_host
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=task_queue)
    (tmp_path / "never-called.json").write_text(json.dumps({"responses": []}))
    model = f"scripted:{tmp_path / 'never-called.json'}"
    session = f"drift-agent-{uuid.uuid4().hex[:8]}"
    agent = tmp_path / "support.toml"
    agent.write_text(f'model = "{model}"\nsystem = "You answer support questions."\n')
    try:
        # no worker: the session's start input is all its history holds, and enough
        await KeelClient(client, task_queue, store).start(
            session, "hi", config=SessionConfig(model=model, system="You answer questions.")
        )
        query = f'WorkflowId = "{session}"'
        result = await check(env, "--query", query, "--agent", str(agent), "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        [drift] = by_session(result)[session]["drift"]
        assert (drift["kind"], drift["level"]) == ("system_changed", "drift")
        assert "the session keeps its system prompt (21 characters" in drift["detail"]
        strict = await check(env, "--query", query, "--agent", str(agent), "--strict")
        assert strict.returncode == 1 and "system_changed" in strict.stdout, strict.stdout
    finally:
        await client.get_workflow_handle(session).terminate("test over")
