"""Sessions using MCP servers' tools, on a real dev server: servers nobody here wrote
(mcp-server-time, mcp-server-git, server-everything over HTTP), and a hostile one of ours."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel import ConversationStore, KeelClient, Message, ToolResult
from keel.activities.mcp import McpServerConfig
from keel.activities.tool_run import MAX_RESULT_BYTES
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.mcp import (
    children_running,
    everything_http,
    git_server,
    hostile_server,
    time_server,
)
from tests.helpers.scripts import respond, text, tool_use
from tests.workflows.test_session import no_dangling

ROOT = Path(__file__).resolve().parents[2]


def sid() -> str:
    return f"mcp-{uuid.uuid4().hex[:10]}"


def results(message: Message) -> dict[str, ToolResult]:
    return {b.toolResult.toolUseId: b.toolResult for b in message.content if b.toolResult}


async def test_a_time_tool_is_listed_and_called(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = script(
        [
            respond(
                tool_use("t1", "get_current_time", timezone="Europe/Paris"),
                tool_use("t2", "get_current_time", timezone="Nowhere/Atlantis"),
                stop="tool_use",
            ),
            respond(text("it is late")),
        ],
        tool_modules=["mcp:time"],
    )
    session = sid()
    async with run_worker(mcp_servers=[time_server()]):
        record = await keel.run(session, "what time is it?", config=config, timeout_s=60)
        state = await keel.state(session)
    assert record.status == "completed", record
    # the model saw the server's tools, under their own names, with their schemas
    seen = {t["toolSpec"]["name"]: t["toolSpec"] for t in model_log()[0]["tools"]}
    assert set(seen) == {"get_current_time", "convert_time"}
    assert "timezone" in seen["get_current_time"]["inputSchema"]["json"]["properties"]
    assert seen["get_current_time"]["description"]
    done = results(state.messages[2])
    assert done["t1"].status == "success"
    assert done["t1"].content[0].json_["timezone"] == "Europe/Paris"
    assert done["t2"].status == "error"  # the tool's isError is a result, not a retry
    assert "Nowhere/Atlantis" in (done["t2"].content[0].text or "")
    no_dangling(state.messages)


async def test_a_git_tool_runs_on_a_repository(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "hello.txt").write_text("hi\n")
    config = script(
        [
            respond(tool_use("g1", "git_status", repo_path=str(repo)), stop="tool_use"),
            respond(text("one untracked file")),
        ],
        tool_modules=["mcp:git"],
    )
    session = sid()
    async with run_worker(mcp_servers=[git_server(repo)]):
        record = await keel.run(session, "status?", config=config, timeout_s=60)
        state = await keel.state(session)
    assert record.status == "completed", record
    result = results(state.messages[2])["g1"]
    assert result.status == "success" and "hello.txt" in (result.content[0].text or "")


async def test_approval_by_name_holds_an_mcp_tool_until_approved(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("t1", "get_current_time", timezone="UTC"), stop="tool_use"),
            respond(text("done")),
        ],
        tool_modules=["mcp:time"],
        approval_tools=["get_current_time"],
    )
    session = sid()
    async with run_worker(mcp_servers=[time_server()]):
        waiting = await keel.run(session, "time?", config=config, timeout_s=60)
        assert waiting.status == "awaiting_human", waiting
        [interrupt] = waiting.interrupts
        assert interrupt.kind == "approval" and interrupt.name == "get_current_time"
        assert not any(e.type == "tool_started" for e in (await keel.state(session)).events)
        await keel.decide(session, interrupt.id, "approve", approver="ops")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=60)
        state = await keel.state(session)
    assert done.status == "completed", done
    assert results(state.messages[2])["t1"].status == "success"


async def test_a_tool_policy_judges_mcp_tools_like_any_other(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    convert = tool_use(
        "c1", "convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"
    )
    config = script(
        [
            respond(
                tool_use("t1", "get_current_time", timezone="Atlantis/Capital"),
                tool_use("t2", "get_current_time", timezone="UTC"),
                convert,
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        tool_modules=["mcp:time"],
        policy="clocks",
    )
    session = sid()
    async with run_worker(mcp_servers=[time_server()]):
        waiting = await keel.run(session, "times?", config=config, timeout_s=60)
        assert waiting.status == "awaiting_human", waiting
        [interrupt] = waiting.interrupts
        assert interrupt.name == "convert_time"
        assert interrupt.reason == "conversions are checked by a person"
        await keel.decide(session, interrupt.id, "deny", reason="not today", approver="ops")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=60)
        state = await keel.state(session)
    assert done.status == "completed", done
    ran = results(state.messages[2])
    denied = ran["t1"].content[0].text or ""
    assert ran["t1"].status == "error" and "Atlantis keeps no time" in denied
    assert ran["t2"].status == "success"
    assert ran["c1"].status == "error" and "not today" in (ran["c1"].content[0].text or "")
    started = {e.detail.get("id") for e in state.events if e.type == "tool_started"}
    assert started == {"t2"}  # the denied ones never reached the server


async def test_the_call_after_the_server_was_killed_works(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [
            respond(tool_use("t1", "get_current_time", timezone="UTC"), stop="tool_use"),
            respond(text("first")),
            respond(tool_use("t2", "get_current_time", timezone="Asia/Tokyo"), stop="tool_use"),
            respond(text("second")),
        ],
        tool_modules=["mcp:time"],
    )
    session = sid()
    async with run_worker(mcp_servers=[time_server()]):
        first = await keel.run(session, "time?", config=config, timeout_s=60)
        [pid] = children_running("mcp-server-time")
        os.kill(pid, signal.SIGKILL)
        second = await keel.run(session, "and now?", config=config, timeout_s=60)
        state = await keel.state(session)
        [new_pid] = children_running("mcp-server-time")
    assert first.status == second.status == "completed"
    assert new_pid != pid
    assert results(state.messages[6])["t2"].status == "success"
    assert results(state.messages[6])["t2"].content[0].json_["timezone"] == "Asia/Tokyo"


async def test_a_hostile_server_cannot_run_anything_or_flood_history(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    canary = tmp_path / "canary.txt"
    config = script(
        [
            respond(
                tool_use("h1", "mcpt_fake_tool_use", path=str(canary)),
                tool_use("h2", "mcpt_huge", size=3 * MAX_RESULT_BYTES),
                stop="tool_use",
            ),
            respond(text("I will not obey tool output")),
        ],
        tool_modules=["mcp:hostile"],
    )
    session = sid()
    async with run_worker(mcp_servers=[hostile_server()]):
        record = await keel.run(session, "go", config=config, timeout_s=60)
        state = await keel.state(session)
        history = await keel.client.get_workflow_handle(session).fetch_history()
    assert record.status == "completed", record
    assert not canary.exists()
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    started = [e.detail.get("tool") for e in state.events if e.type == "tool_started"]
    assert sorted(started) == ["mcpt_fake_tool_use", "mcpt_huge"]  # nothing else ran
    done = results(state.messages[2])
    assert done["h1"].status == "success" and '"toolUse"' in (done["h1"].content[0].text or "")
    assert done["h2"].status == "error" and "over Keel's limit" in (
        done["h2"].content[0].text or ""
    )
    assert len(history.to_json()) < 200_000  # the huge answer never entered history
    # the smuggled toolUse reached the model as text inside a toolResult, nothing more
    assert 'toolUseId\\": \\"smuggled' in json.dumps(model_log()[1]["messages"])
    no_dangling(state.messages)


EVERYTHING_TOOLS = ("get-structured-content", "get-tiny-image", "trigger-long-running-operation")


async def test_server_everything_over_http(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    with everything_http() as url:
        server = McpServerConfig(name="every", url=url, tools=EVERYTHING_TOOLS)
        config = script(
            [
                respond(
                    tool_use("s1", "get-structured-content", location="Chicago"),
                    tool_use("i1", "get-tiny-image"),
                    stop="tool_use",
                ),
                respond(text("sunny, and a logo")),
                respond(
                    tool_use("l1", "trigger-long-running-operation", duration=60, steps=60),
                    stop="tool_use",
                ),
                respond(text("never reached")),
                respond(text("after the cancel")),
            ],
            tool_modules=["mcp:every"],
        )
        session = sid()
        async with run_worker(mcp_servers=[server]):
            record = await keel.run(session, "weather and logo", config=config, timeout_s=60)
            assert record.status == "completed", record
            state = await keel.state(session)
            done = results(state.messages[2])
            structured = done["s1"].content[0].json_
            assert done["s1"].status == "success" and {"temperature", "conditions"} <= set(
                structured
            )
            kinds = [
                next(k for k, v in b.model_dump(mode="json").items() if v)
                for b in done["i1"].content
            ]
            assert kinds == ["text", "image", "text"]
            assert done["i1"].content[1].image is not None
            assert done["i1"].content[1].image.format == "png"

            ack = await keel.prompt(session, "a long one", config=config)
            for _ in range(200):  # until the slow tool runs
                if any(e.type == "tool_started" for e in (await keel.state(session)).events[-3:]):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            began = time.monotonic()
            await keel.cancel(session, "enough")
            cancelled = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
            took = time.monotonic() - began
            state = await keel.state(session)
        assert cancelled.status == "cancelled", cancelled
        assert took < 10, f"the cancel took {took:.1f} s"
        result = results(state.messages[-1 if state.messages[-1].role == "user" else -2])
        assert result["l1"].status == "error" and "cancelled" in (
            result["l1"].content[0].text or ""
        )
        no_dangling(state.messages)


async def test_a_worker_killed_during_an_mcp_call_is_replaced(
    client: Client,
    keel: KeelClient,
    task_queue: str,
    store: ConversationStore,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.jsonl"
    server = hostile_server(log=log)
    spec = f"{server.name}={' '.join(server.command)}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORE": str(tmp_path / "store"),  # the store fixture's directory
        "KEEL_MCP_HOSTILE_ENV": json.dumps(dict(server.env)),  # the server's own variables
    }
    config = script(
        [
            respond(tool_use("s1", "mcpt_slow", seconds=3, label="survived"), stop="tool_use"),
            respond(text("done once")),
        ],
        tool_modules=["mcp:hostile"],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_servers.worker", "--mcp", spec],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "worker.err").open("w"),
        text=True,
    )
    session = sid()
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        ack = await keel.prompt(session, "go", config=config)
        deadline = time.monotonic() + 60
        while not (log.exists() and '"start"' in log.read_text()):
            assert proc.poll() is None, (tmp_path / "worker.err").read_text()
            assert time.monotonic() < deadline, "the MCP call never started"
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    async with run_worker(mcp_servers=[hostile_server(log=log)]):
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=90)
        state = await keel.state(session)
    assert record.status == "completed", record
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    done = results(state.messages[2])
    assert list(done) == ["s1"] and done["s1"].content[0].text == "survived"
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    starts = [e for e in starts if e["event"] == "start"]
    # made again by the next worker, with the same idempotency key
    assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]
    assert {e["key"] for e in starts} == {f"{session}/s1"}
