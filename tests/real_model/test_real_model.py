"""Keel against a real model: llama-cpp-python's server with SmolLM2-135M-Instruct.

Everything goes through the production ``openai:`` provider, to a real OpenAI-compatible
server (``tests/real_model/llama_server.py``), with workers in their own processes as
``keel worker`` runs them. The model is tiny: the tests assert what Keel does with whatever it
says (that a call it made ran as a ``keel.tool.run`` activity and its result reached the next
model request), not what it chose; a prompt that draws no tool call is followed by another,
a bounded number of times. Temperature 0 throughout, and small ``max_tokens``.

Skipped (with the reason) without the packages; ``bash .ci/real-model`` installs them, and
``KEEL_REQUIRE_REAL_MODEL=1`` turns the skip into a failure (see ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel import (
    InferenceConfig,
    KeelClient,
    Message,
    SessionConfig,
    TextChunk,
    ToolResult,
    ToolUse,
    TurnRecord,
)
from keel.workflows.activity_options import MODEL_ACTIVITY, TOOL_ACTIVITY
from keel.workflows.messages import tool_uses
from tests.helpers.cli import ROOT, keel_env
from tests.real_model.llama_server import LlamaServer
from tests.real_model.proxy import RecordingProxy

MODEL = "openai:smollm2"
LANE_TOOLS = "tests.real_model.tools"
TOOL_PROMPTS = (
    "What is the weather in Paris?",
    "Use get_weather to get the weather in London.",
    "Call the get_weather tool for Berlin.",
)
# Greedy decoding ends these by themselves (finish reason stop), after about 150 and 390
# tokens (1.3 and 3 s on 2 idle cores): the longer one leaves time to kill something while
# it streams, even on a loaded machine, and still finishes.
LONG_PROMPT = "List the numbers from 1 to 40, separated by commas."
LONGER_PROMPT = "List the numbers from 1 to 100, separated by commas."
CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def sid(kind: str) -> str:
    return f"real-{kind}-{uuid.uuid4().hex[:8]}"


def config(max_tokens: int = 64, **fields: Any) -> SessionConfig:
    return SessionConfig(
        model=MODEL, inference=InferenceConfig(temperature=0, maxTokens=max_tokens), **fields
    )


def text_of(message: Message | None) -> str:
    return "".join(b.text or "" for b in message.content) if message is not None else ""


def results_of(messages: Sequence[Message]) -> dict[str, ToolResult]:
    return {
        b.toolResult.toolUseId: b.toolResult for m in messages for b in m.content if b.toolResult
    }


# ------------------------------------------------------------------------------- workers


class LaneWorker:
    """``keel worker`` in its own process, on this test's queue, store and model server."""

    def __init__(
        self, env: WorkflowEnvironment, task_queue: str, tmp_path: Path, base_url: str
    ) -> None:
        self.address = env.client.service_client.config.target_host
        self.task_queue = task_queue
        self.store = tmp_path / "store"  # the test's `store` fixture opens the same directory
        self.base_url = base_url
        self.log = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, tools: str | None = None) -> LaneWorker:
        env = keel_env(
            TEMPORAL_ADDRESS=self.address,
            KEEL_TASK_QUEUE=self.task_queue,
            KEEL_STORE=str(self.store),
            OPENAI_BASE_URL=self.base_url,
            NO_PROXY="127.0.0.1,localhost",
        )
        env.pop("OPENAI_API_KEY", None)
        command = [sys.executable, "-m", "keel.worker.cli", "worker"]
        if tools:
            command += ["--tools", tools]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def lane_worker(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> Iterator[Any]:
    """``lane_worker(base_url, tools=None)`` starts a worker process; all stop after the test."""
    started: list[LaneWorker] = []

    def start(base_url: str, tools: str | None = None) -> LaneWorker:
        worker = LaneWorker(temporal_env, task_queue, tmp_path, base_url).start(tools)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
        # shown with a failed test's output: what each worker logged
        print(f"--- {worker.log.name} (exit {worker.process and worker.process.returncode})")
        print(worker.text()[-4000:])


@contextmanager
def proxy_for(server: LlamaServer) -> Iterator[RecordingProxy]:
    with RecordingProxy(server.base_url) as proxy:
        yield proxy


# ------------------------------------------------------------------------------- helpers


async def activity_runs(client: Client, session: str, kind: str) -> list[dict[str, Any]]:
    """The session's activities of a type: input (as JSON) and the attempt that finished."""
    history = await client.get_workflow_handle(session).fetch_history()
    scheduled: dict[int, dict[str, Any]] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == kind:
                payload = attrs.input.payloads[0].data
                scheduled[event.event_id] = {"input": json.loads(payload), "attempt": None}
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in scheduled:
                scheduled[started.scheduled_event_id]["attempt"] = started.attempt
    return list(scheduled.values())


async def first_text(keel: KeelClient, session: str, timeout_s: float = 60) -> TextChunk:
    """The first chunk of streamed text of the session's running model call."""

    async def wait() -> TextChunk:
        async for chunk in keel.model_text(session, poll_s=0.05):
            if chunk.text:
                return chunk
        raise AssertionError("the session stopped before any text streamed")

    return await asyncio.wait_for(wait(), timeout_s)


async def turn_with_a_tool_call(
    keel: KeelClient, make_config: Any, *, settle_s: float = 90
) -> tuple[str, TurnRecord, ToolUse]:
    """Prompt until the model calls ``get_weather`` (bounded); the session, turn and call."""
    tried = []
    for prompt in TOOL_PROMPTS:
        session = sid("tool")
        record = await keel.run(session, prompt, config=make_config(), timeout_s=settle_s)
        state = await keel.state(session)
        parked = [i.tool_use for i in record.interrupts]  # not in the conversation yet (S5)
        for use in [*parked, *(u for m in state.messages for u in tool_uses(m))]:
            if use.name == "get_weather":
                return session, record, use
        tried.append((prompt, record.status, text_of(record.message)[:80]))
    pytest.fail(f"the model called no tool in {len(TOOL_PROMPTS)} prompts: {tried}")


def tool_message_in(bodies: list[dict[str, Any]], use_id: str) -> tuple[int, dict[str, Any]]:
    """The first model request that carries the result of ``use_id``, and that message."""
    for index, body in enumerate(bodies):
        for message in body["messages"]:
            if message.get("role") == "tool" and message.get("tool_call_id") == use_id:
                return index, message
    raise AssertionError(f"no model request carried the result of {use_id}")


# --------------------------------------------------------------------------------- tests


async def test_a_plain_turn(keel: KeelClient, real_model: LlamaServer, lane_worker: Any) -> None:
    lane_worker(real_model.base_url)  # no tools: the request streams
    session = sid("plain")
    record = await keel.run(
        session, "Reply with one word: hello", config=config(max_tokens=48), timeout_s=60
    )
    state = await keel.state(session)
    assert record.status == "completed" and record.stop_reason == "end_turn", record
    assert text_of(record.message).strip(), record.message
    assert [m.role for m in state.messages] == ["user", "assistant"]
    # llama-cpp-python reports no usage in a stream: Keel says unknown, not 0
    assert record.usage.unknown is True and record.usage.totalTokens == 0
    [called] = [e for e in state.events if e.type == "model_called"]
    assert called.detail["usage"]["unknown"] is True


async def test_streaming_to_a_watcher(
    keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    lane_worker(real_model.base_url)
    session = sid("stream")
    await keel.prompt(session, LONG_PROMPT, config=config(max_tokens=200))
    chunks: list[TextChunk] = []

    async def watch() -> None:
        async for chunk in keel.model_text(session, poll_s=0.05):
            chunks.append(chunk)
            if chunk.end:
                return

    await asyncio.wait_for(watch(), 90)
    record = await keel.wait_turn(session, 1, timeout_s=60)
    assert record.status == "completed", record
    texts = [c.text for c in chunks if c.text]
    assert len(texts) > 1, chunks  # it arrived in pieces, as the server streamed it
    assert {c.attempt for c in chunks} == {1}
    assert "".join(texts) == text_of(record.message)


async def test_a_tool_call_runs_as_an_activity_and_its_result_goes_back(
    client: Client, keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    with proxy_for(real_model) as proxy:
        worker = lane_worker(proxy.base_url, LANE_TOOLS)
        session, record, use = await turn_with_a_tool_call(
            keel, lambda: config(tool_modules=[LANE_TOOLS], max_cycles_per_turn=2, on_budget="fail")
        )
        bodies = proxy.chat_bodies()
    state = await keel.state(session)
    # the call ran as a keel.tool.run activity, with the input the model gave
    runs = await activity_runs(client, session, TOOL_ACTIVITY)
    ran = [r for r in runs if r["input"]["tool_use"]["toolUseId"] == use.toolUseId]
    assert len(ran) == 1 and ran[0]["input"]["tool_use"]["input"] == use.input, runs
    result = results_of(state.messages)[use.toolUseId]
    assert result.status == "success" and (result.content[0].text or "").startswith("WEATHER-")
    # ... and its result reached the next model request
    index, message = tool_message_in(bodies, use.toolUseId)
    assert index >= 1 and message["content"] == result.content[0].text
    assert bodies[index - 1]["tool_choice"] == "auto"  # the request the call answered
    # the first request with tools streamed and came back empty: every later one is unstreamed
    assert [body["stream"] for body in bodies] == [True] + [False] * (len(bodies) - 1)
    assert record.cycles >= 2 and "cannot stream an answer to a request with tools" in (
        worker.text()
    )


async def test_an_approval_parks_the_turn_until_approved_then_the_tool_runs(
    client: Client, keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    with proxy_for(real_model) as proxy:
        lane_worker(proxy.base_url, LANE_TOOLS)
        make = lambda: config(  # noqa: E731
            tool_modules=[LANE_TOOLS],
            approval_tools=["get_weather"],
            max_cycles_per_turn=2,
            on_budget="fail",
        )
        session, parked, use = await turn_with_a_tool_call(keel, make, settle_s=60)
        assert parked.status == "awaiting_human", parked
        [interrupt] = parked.interrupts
        assert interrupt.kind == "approval" and interrupt.tool_use == use
        assert await activity_runs(client, session, TOOL_ACTIVITY) == []  # nothing ran yet
        waiting_bodies = len(proxy.chat_bodies())
        await keel.decide(session, interrupt.id, "approve", approver="lane")
        done = await keel.wait_turn(session, parked.turn_id, timeout_s=90)
        bodies = proxy.chat_bodies()
    assert done.status != "awaiting_human" or done.interrupts[0].id != interrupt.id, done
    runs = await activity_runs(client, session, TOOL_ACTIVITY)
    assert [r["input"]["tool_use"]["toolUseId"] for r in runs][:1] == [use.toolUseId]
    index, message = tool_message_in(bodies, use.toolUseId)
    assert index >= waiting_bodies  # asked after the approval
    assert message["content"].startswith("WEATHER-")


async def test_structured_output(
    keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    with proxy_for(real_model) as proxy:
        lane_worker(proxy.base_url)  # no tools but final_result
        calls: list[tuple[str, TurnRecord, ToolUse]] = []
        for prompt in (
            "Which city is the capital of France?",
            "Call final_result with city Paris.",
        ):
            session = sid("output")
            record = await keel.run(
                session,
                prompt,
                config=config(output_schema=CITY_SCHEMA, max_cycles_per_turn=3, on_budget="fail"),
                timeout_s=60,
            )
            state = await keel.state(session)
            uses = [u for m in state.messages for u in tool_uses(m) if u.name == "final_result"]
            if uses:
                calls = [(session, record, u) for u in uses]
                break
        else:
            pytest.fail("the model never called final_result")
        bodies = proxy.chat_bodies()
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["final_result"]
    assert bodies[0]["tools"][0]["function"]["parameters"] == CITY_SCHEMA
    session, record, _ = calls[0]
    state = await keel.state(session)
    results = results_of(state.messages)
    valid = [
        u for _, _, u in calls if jsonschema.Draft202012Validator(CITY_SCHEMA).is_valid(u.input)
    ]
    for _, _, use in calls:
        if use in valid:
            continue
        assert results[use.toolUseId].status == "error"  # Keel told the model why
        assert "does not match the output schema" in (results[use.toolUseId].content[0].text or "")
    if valid:
        assert record.status == "completed" and record.output == valid[0].input, record
    else:
        assert record.output is None and record.status != "completed", record


async def test_a_worker_killed_mid_call_and_the_turn_still_completes(
    client: Client, keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    first = lane_worker(real_model.base_url)
    session = sid("sigkill")
    await keel.prompt(session, LONGER_PROMPT, config=config(max_tokens=480))
    chunk = await first_text(keel, session)
    first.kill()  # SIGKILL while the model call streams
    assert chunk.attempt == 1
    lane_worker(real_model.base_url)  # another worker picks the call up
    record = await keel.wait_turn(session, 1, timeout_s=90)
    assert record.status == "completed" and record.stop_reason == "end_turn", record
    assert "99, 100" in text_of(record.message)
    [run] = await activity_runs(client, session, MODEL_ACTIVITY)
    assert run["attempt"] >= 2  # the call was retried on the second worker
    state = await keel.state(session)
    assert [m.role for m in state.messages] == ["user", "assistant"]


async def test_the_server_killed_mid_stream(
    client: Client, keel: KeelClient, real_model: LlamaServer, lane_worker: Any
) -> None:
    worker = lane_worker(real_model.base_url)
    session = sid("server-kill")
    await keel.prompt(session, LONGER_PROMPT, config=config(max_tokens=480))
    await first_text(keel, session)
    real_model.kill()  # SIGKILL: the stream breaks off, then the port refuses connections
    await asyncio.to_thread(real_model.restart)  # Temporal retries the call meanwhile
    record = await keel.wait_turn(session, 1, timeout_s=120)
    assert record.status == "completed" and record.stop_reason == "end_turn", record
    assert "99, 100" in text_of(record.message)
    [run] = await activity_runs(client, session, MODEL_ACTIVITY)
    assert run["attempt"] >= 2
    # each failed attempt: one line in the worker's log, no traceback, never "will retry"
    log = worker.text()
    retries = [line for line in log.splitlines() if "; retrying in" in line]
    assert 1 <= len(retries) == run["attempt"] - 1, log[-3000:]
    assert "broke off" in retries[0] or "cut short" in retries[0], retries[0]
    assert all(real_model.base_url in line for line in retries)
    assert "Traceback" not in log and "will retry" not in log


# its own server with a 1,024-token window: against the lane's 4,096 the retry alone read some
# 2,800 tokens, 30-50 s on 2 cores and over 120 s on a loaded CI machine
@pytest.mark.timeout(180)
async def test_a_conversation_past_the_context_window_is_trimmed_not_failed(
    keel: KeelClient, real_model: LlamaServer, lane_worker: Any, tmp_path: Path
) -> None:
    """An imported conversation of about 2,000 tokens against n_ctx 1024.

    The server answers "exceeds context window"; Keel trims what the model sees, keeping the
    task and the latest exchanges, and asks once more: the turn completes.
    """
    with LlamaServer(tmp_path / "small.log", ["--n_ctx", "1024"]) as small:
        worker = lane_worker(small.base_url)
        filler = "The quick brown fox jumps over the lazy dog. " * 10  # ~100 tokens a message
        history: list[Message] = [Message(role="user", content=[{"text": "Remember: the task."}])]
        for i in range(10):
            history.append(Message(role="assistant", content=[{"text": f"Noted {i}. {filler}"}]))
            history.append(Message(role="user", content=[{"text": f"More {i}. {filler}"}]))
        history.append(Message(role="assistant", content=[{"text": "Ready."}]))
        session = sid("context")
        record = await keel.run(
            session,
            "Reply with one word: hello",
            config=config(max_tokens=160),  # room to end its answer: 1024 - 3/4 of it
            messages=history,
            timeout_s=120,
        )
    assert record.status == "completed", record
    assert text_of(record.message).strip()
    assert "maximum context length is 1024" in worker.text(), worker.text()[-2000:]
    state = await keel.state(session)
    assert len(state.messages) == len(history) + 2  # the whole history is kept
