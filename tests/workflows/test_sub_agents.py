"""Sub-agents: tools that run one turn of a child AgentSession, approvals via the parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowExecutionStatus

from keel import KeelClient, SubAgent, TurnRecord
from keel.workflows.messages import tool_uses
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import save_history

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}


def sid() -> str:
    return f"sa-{uuid.uuid4().hex[:10]}"


async def until_waiting(keel: KeelClient, session: str, turn: int) -> TurnRecord:
    record = await keel.wait_turn(session, turn, timeout_s=30)
    for _ in range(100):
        if record.interrupts:
            return record
        await asyncio.sleep(0.1)
        record = await keel.turn(session, turn)
    raise AssertionError(f"{session} turn {turn} has no interrupt: {record}")


async def test_two_sub_agents_one_approved_through_the_parent(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    out = tmp_path / "writes.txt"
    researcher = script([respond(text("fact: cats purr"))])
    writer = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(out), value="draft"), stop="tool_use"
            ),
            respond(tool_use("f1", "final_result", title="Purring"), stop="tool_use"),
        ],
        output_schema=SCHEMA,
    )
    parent = script(
        [
            respond(
                tool_use("r1", "researcher", prompt="find a fact"),
                tool_use("w1", "writer", prompt="write it"),
                stop="tool_use",
            ),
            respond(text("all done")),
        ],
        agents={
            "researcher": SubAgent(description="Finds facts.", config=researcher),
            "writer": SubAgent(description="Writes.", config=writer),
        },
    )
    # replay runs a history under its file's name: the recorded parent must have that id, as
    # its children's ids derive from it
    recording = os.environ.get("KEEL_RECORD_HISTORIES") == "1"
    session = "sub_agents_parent" if recording else sid()
    writer_id = f"{session}/writer-w1"
    async with run_worker():
        ack = await keel.prompt(session, "research then write", config=parent)
        waiting = await until_waiting(keel, session, ack.turn_id)
        (interrupt,) = waiting.interrupts
        assert interrupt.tool_use.name == "guarded_record"
        assert interrupt.reason.startswith("[sub-agent writer]")
        assert [i.id for i in (await keel.pending(session)).interrupts] == [interrupt.id]
        await keel.decide(session, interrupt.id, "approve", approver="ann")
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
        child = await keel.state(writer_id)
        researcher_state = await keel.state(f"{session}/researcher-r1")
    await save_history(keel.client, session, "sub_agents_parent")
    await save_history(keel.client, writer_id, "sub_agents_child_approval")
    assert record.status == "completed", record
    assert out.read_text() == "draft\n"  # ran once, in the child, after the approval
    results = {
        b.toolResult.toolUseId: b.toolResult for b in state.messages[2].content if b.toolResult
    }
    assert results["r1"].content[0].text == "fact: cats purr"
    assert results["w1"].content[0].text == '{"title":"Purring"}'
    assert child.status == "closed"
    assert [m.role for m in child.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert tool_uses(child.messages[1])[0].name == "guarded_record"
    assert child.turns[0].output == {"title": "Purring"}
    assert researcher_state.messages[0].content[0].text == "find a fact"
    first = next(r for r in model_log() if r["session"] == session)
    specs = {t["toolSpec"]["name"]: t["toolSpec"] for t in first["tools"]}
    assert specs["writer"]["description"] == "Writes."
    assert specs["researcher"]["inputSchema"]["json"]["required"] == ["prompt"]


async def test_cancel_of_the_parent_cancels_the_child(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    child_config = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "x"), value="v"),
                stop="tool_use",
            )
        ]
    )
    parent = script(
        [respond(tool_use("c1", "helper", prompt="do it"), stop="tool_use"), respond(text("x"))],
        agents={"helper": SubAgent(description="Helps.", config=child_config)},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=parent)
        await until_waiting(keel, session, ack.turn_id)
        await keel.cancel(session, "stop it")
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30, through_interrupts=True)
        child = keel.client.get_workflow_handle(f"{session}/helper-c1")
        for _ in range(100):
            status = (await child.describe()).status
            if status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
        pending = await keel.pending(session)
    assert record.status == "cancelled"
    assert status == WorkflowExecutionStatus.CANCELED
    assert pending.interrupts == []
    assert not (tmp_path / "x").exists()


async def test_worker_gone_while_the_child_waits_loses_nothing(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    out = tmp_path / "once"
    child_config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(out), value="v"), stop="tool_use"),
            respond(text("child done")),
        ]
    )
    parent = script(
        [respond(tool_use("c1", "helper", prompt="do it"), stop="tool_use"), respond(text("ok"))],
        agents={"helper": SubAgent(description="Helps.", config=child_config)},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=parent)
        (interrupt,) = (await until_waiting(keel, session, ack.turn_id)).interrupts
    # no worker now; a new one takes over the parent and the waiting child
    async with run_worker():
        await keel.decide(session, interrupt.id, "approve")
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert record.status == "completed"
    assert out.read_text() == "v\n"
    assert record.message is not None and record.message.content[0].text == "ok"


async def test_a_worker_killed_while_a_child_runs_its_tool_loses_nothing(
    keel: KeelClient, script: Script, tmp_path: Path, task_queue: str
) -> None:
    child_config = script(
        [
            respond(tool_use("s1", "slow", seconds=3.0, label="survived"), stop="tool_use"),
            respond(text("child done")),
        ]
    )
    parent = script(
        [respond(tool_use("h1", "helper", prompt="go"), stop="tool_use"), respond(text("ok"))],
        agents={"helper": SubAgent(description="Helps.", config=child_config)},
    )
    session = sid()
    child_id = f"{session}/helper-h1"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": keel.client.service_client.config.target_host,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORE": str(tmp_path / "store"),  # the store of this test's KeelClient
    }

    def start_worker() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_servers.worker", "--tools", SAMPLE_TOOLS],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    first = start_worker()
    second: subprocess.Popen[str] | None = None
    try:
        ack = await keel.prompt(session, "delegate", config=parent)
        for _ in range(300):  # until the child's tool runs on the first worker
            try:
                events = (await keel.state(child_id)).events
            except Exception:  # the child may not exist yet
                events = []
            if any(e.type == "tool_started" for e in events):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the child's tool never started")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = start_worker()
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=90)
        state = await keel.state(session)
        child = await keel.state(child_id)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    assert record.status == "completed", record
    helper = next(b.toolResult for b in state.messages[2].content if b.toolResult)
    assert helper.status == "success" and helper.content[0].text == "child done"
    assert [m.role for m in child.messages] == ["user", "assistant", "user", "assistant"]
    slow = child.messages[2].content[0].toolResult
    assert slow is not None and slow.content[0].text == "survived"
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
