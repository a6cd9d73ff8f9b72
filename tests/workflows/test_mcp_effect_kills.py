"""An MCP tool's class decides what happens when its worker is SIGKILLed mid-call, on a real
MCP server (tests/mcp_servers/hostile.py, over stdio).

``mcpt_slow`` is annotated ``idempotentHint`` by its server; the worker's MCP configuration
(``KEEL_MCP_HOSTILE_EFFECTS``, ``McpServerConfig.effects``) makes it ``write`` or ``read``
here. An ``idempotent`` or ``read`` tool runs again unasked, with the same idempotency key
(tests/workflows/test_mcp_sessions.py has the annotated case); a ``write`` one is not run
again: a person is asked (``outcome_unknown``) and settles it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel import KeelClient
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.mcp import hostile_server
from tests.helpers.scripts import respond, text, tool_use
from tests.workflows.test_mcp_sessions import results
from tests.workflows.test_session import no_dangling

ROOT = Path(__file__).resolve().parents[2]


def _starts(log: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return [e for e in events if e["event"] == "start"]


async def _kill_a_worker_mid_call(
    client: Client, keel: KeelClient, task_queue: str, tmp_path: Path, effect: str, config: Any
) -> tuple[str, int]:
    """Start the session on a worker process, SIGKILL it inside ``mcpt_slow``: session, turn."""
    log = tmp_path / "server.jsonl"
    server = hostile_server(log=log)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORE": str(tmp_path / "store"),  # the store fixture's directory
        "KEEL_MCP_HOSTILE_ENV": json.dumps(dict(server.env)),
        "KEEL_MCP_HOSTILE_EFFECTS": json.dumps({"mcpt_slow": effect}),
    }
    spec = f"{server.name}={' '.join(server.command)}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_servers.worker", "--mcp", spec],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "worker.err").open("w"),
        text=True,
    )
    session = f"mcpfx-{uuid.uuid4().hex[:10]}"
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        ack = await keel.prompt(session, "go", config=config)
        deadline = time.monotonic() + 60
        while not (log.exists() and _starts(log)):
            assert proc.poll() is None, (tmp_path / "worker.err").read_text()
            assert time.monotonic() < deadline, "the MCP call never started"
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return session, ack.turn_id


@pytest.mark.parametrize("effect", ["write", "read"])
async def test_an_mcp_tool_killed_mid_call_follows_its_class(
    client: Client,
    keel: KeelClient,
    task_queue: str,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    effect: str,
) -> None:
    config = script(
        [
            respond(tool_use("s1", "mcpt_slow", seconds=3, label="survived"), stop="tool_use"),
            respond(text("done")),
        ],
        tool_modules=["mcp:hostile"],
    )
    session, turn = await _kill_a_worker_mid_call(
        client, keel, task_queue, tmp_path, effect, config
    )
    log = tmp_path / "server.jsonl"
    again = replace(hostile_server(log=log), effects={"mcpt_slow": effect})
    async with run_worker(mcp_servers=[again]):
        record = await keel.wait_turn(session, turn, timeout_s=90)
        if effect == "write":
            assert record.status == "awaiting_human", record
            [interrupt] = record.interrupts
            assert interrupt.kind == "outcome_unknown" and interrupt.name == "mcpt_slow"
            assert "without a result" in interrupt.reason
            assert len(_starts(log)) == 1  # not run again blindly
            # KeelClient sends it again while the interrupt is not open yet: the query above
            # may show it while the task that opens it waits (the dead worker's sticky queue
            # holds that task for a second), and an update joining that task is validated
            # before the tool's result (keel.worker.client.calls.SETTLE_DELAYS_S)
            await keel.resolve(session, interrupt.id, "seen")
            record = await keel.wait_turn(session, turn, timeout_s=60)
        state = await keel.state(session)
        listed = await keel.effects(session)
    assert record.status == "completed", record
    done = results(state.messages[2])
    starts = _starts(log)
    assert {e["key"] for e in starts} == {f"{session}/s1"}
    if effect == "write":
        assert len(starts) == 1  # a person said what happened: it never ran again
        assert done["s1"].content[0].text == "seen"
        [call] = listed
        assert (call.effect, call.outcome) == ("write", "resolved")
    else:
        assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]  # again, unasked
        assert done["s1"].content[0].text == "survived"
        assert listed == []  # a read tool is not journaled
    no_dangling(state.messages)
