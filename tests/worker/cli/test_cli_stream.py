"""Streamed model text, heartbeat fallback: read by ``KeelClient`` and ``keel watch``.

A stand-in model activity (registered under the model activity's name) heartbeats text that
the test controls, so what a watcher sees is deterministic.
"""

from __future__ import annotations

import asyncio
import io
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from keel import AgentSession, Event, KeelClient, SessionConfig, TextChunk, TurnRecord
from keel.worker.cli.follow import StreamedText, end_streamed_line, event_line, progress_line
from keel.worker.process.sandbox import sandbox_runner
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.activity_options import MODEL_ACTIVITY
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS


class StreamingModel:
    """A model activity that streams whatever text the test sets, until cancelled.

    It never answers, so the session never runs a tool and needs no tool activity.
    """

    def __init__(self) -> None:
        self.text = ""
        self.started = asyncio.Event()

    @activity.defn(name=MODEL_ACTIVITY)
    async def converse(self, request: ModelRequest) -> ModelResponse:
        self.started.set()
        while True:  # heartbeats deliver the cancellation too
            activity.heartbeat({"text_chars": len(self.text), "events": 1, "text": self.text})
            await asyncio.sleep(0.1)


@pytest.fixture
async def streaming(client: Client, task_queue: str) -> AsyncIterator[StreamingModel]:
    model = StreamingModel()
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentSession],
        activities=[model.converse],
        workflow_runner=sandbox_runner(),
        max_heartbeat_throttle_interval=timedelta(seconds=0.3),
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    async with worker:
        yield model


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_streamed_text_reaches_the_client_and_keel_watch(
    client: Client, task_queue: str, streaming: StreamingModel
) -> None:
    keel = KeelClient(client, task_queue)
    session = f"stream-{uuid.uuid4().hex[:8]}"
    await keel.prompt(session, "hi", config=SessionConfig(model="scripted:unused.json"))
    await asyncio.wait_for(streaming.started.wait(), 15)

    address = client.service_client.config.target_host
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=task_queue)
    watch = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel.worker.cli",
        "watch",
        session,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    seen = ""

    async def watched(marker: str) -> None:
        nonlocal seen
        assert watch.stdout is not None
        while marker not in seen:
            chunk = await asyncio.wait_for(watch.stdout.read(1024), 20)
            assert chunk, seen
            seen += chunk.decode()

    try:
        await watched("turn_started")
        streaming.text = "Hello"

        async def hello() -> bool:
            return await keel.streamed_text(session) == (5, "Hello")

        await until(hello)
        await watched("Hello")
        streaming.text = "Hello, world"

        async def world() -> bool:
            return await keel.streamed_text(session) == (12, "Hello, world")

        await until(world)
        await watched("Hello, world")
        assert seen.count("Hello") == 1, seen  # each character once

        watch.send_signal(signal.SIGINT)  # Ctrl-C ends a watch normally
        assert await asyncio.wait_for(watch.wait(), 20) == 0
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()

    await keel.cancel(session, "enough")
    record = await keel.wait_turn(session, 1, timeout_s=20)
    assert record.status == "cancelled"

    async def gone() -> bool:  # the cancelled call leaves once the activity has stopped
        return await keel.streamed_text(session) is None

    await until(gone)


def test_streamed_text_prints_each_character_once() -> None:
    out = io.StringIO()
    text = StreamedText(out)

    def chunk(call: str, attempt: int, offset: int, part: str, gap: int = 0) -> TextChunk:
        return TextChunk(call, attempt, 1, 1, offset, part, gap=gap, end=not part)

    text.write(chunk("1", 1, 0, "Hello"))
    text.write(chunk("1", 1, 5, ", world"))
    text.write(chunk("1", 1, 12, ""))  # the end of the call
    text.write(chunk("1", 2, 0, "Hi!"))  # a retry starts over, on its own line
    text.write(chunk("7", 1, 0, "0123456789"))
    text.write(chunk("7", 1, 8996, "tail", gap=8986))  # the fallback missed some: a gap
    text.end_line()
    text.end_line()
    assert out.getvalue() == "Hello, world\nHi!\n0123456789…tail\n"


def test_a_notice_does_not_land_in_the_middle_of_streamed_text() -> None:
    out = io.StringIO()
    text = StreamedText(out)
    text.write(TextChunk("1", 1, 1, 1, 0, "Hello"))
    end_streamed_line(io.StringIO())  # another stream's line is none of its business
    end_streamed_line(out)
    out.write("keel: waiting for a worker\n")
    text.write(TextChunk("1", 1, 1, 1, 5, ", world"))
    text.end_line()
    assert out.getvalue() == "Hello\nkeel: waiting for a worker\n, world\n"


def event(seq: int, type_: str, turn: int | None = 1, cycle: int | None = None, **d: Any) -> Event:
    at = "2024-05-01T10:00:00+00:00"
    fields = {"seq": seq, "type": type_, "at": at, "turn": turn, "cycle": cycle, "detail": d}
    return Event.model_validate(fields)


def test_event_lines_name_the_useful_details() -> None:
    usage = {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    called = event(4, "model_called", cycle=2, stop_reason="tool_use", usage=usage)
    assert event_line(called).split(None, 1)[1] == (
        "4 t1.c2   model_called      tool_use, 3 in / 4 out tokens"
    )
    assert progress_line(called) == "model call 2 -> tool_use (3 in / 4 out tokens)"
    finished = event(6, "tool_finished", cycle=2, tool="add", id="t1", status="error")
    assert event_line(finished).endswith("tool_finished     add (t1): error")
    assert progress_line(finished) == "tool add finished: error"
    created = event(7, "interrupt_created", kind="approval", id="i-1", tool="rm", tool_use_id="u")
    assert event_line(created).endswith("approval i-1 for rm (u)")
    assert progress_line(created) == "approval needed: rm (interrupt i-1)"
    decided = event(8, "interrupt_decided", id="i-1", status="denied", by="ann")
    assert progress_line(decided) == "interrupt i-1 denied by ann"
    ended = event(9, "turn_ended", status="failed", stop_reason="max_cycles")
    turns = {1: TurnRecord(turn_id=1, status="failed", error="over budget")}
    assert event_line(ended, turns).endswith("turn_ended        failed (max_cycles): over budget")
    assert progress_line(ended, turns) == "turn 1 failed (max_cycles): over budget"
    added = event(3, "message_added", index=0, role="user")
    assert event_line(added).endswith("message_added     user message #0")
    assert progress_line(added) is None
    closed = event(10, "session_closed", turn=None)
    assert event_line(closed).split(None, 1)[1] == "10 -       session_closed"


def test_a_stream_address_taken_stops_keel_worker_when_it_runs(
    server_env: dict[str, str],
) -> None:
    """The endpoint binds when the worker runs (not when its plugin is made): still exit 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**server_env, "KEEL_STREAM_LISTEN": f"127.0.0.1:{port}"}
        result = keel("worker", "--tools", SAMPLE_TOOLS, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"cannot serve model streams on KEEL_STREAM_LISTEN=127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
