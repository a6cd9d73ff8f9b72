"""A model that does not answer is retried for a bounded time, then the turn fails in one line.

``SessionConfig.model_retry_s`` (default 600 s) is the model activity's schedule-to-close
timeout: retries stop when the next one would come after it, and a call still running then
is cut. An answer retrying cannot fix fails the turn at once, whatever the bound.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel import KeelClient, SessionConfig
from keel.workflows.contracts import DEFAULT_MODEL_RETRY_S
from tests.fakes.openai_server import Failure, FakeOpenAIServer, Reply
from tests.helpers.fixture_types import RunWorker


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake server; the in-process worker's provider reads OPENAI_BASE_URL per call."""
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server


@pytest.fixture
def nothing_there(monkeypatch: pytest.MonkeyPatch) -> str:
    """OPENAI_BASE_URL at a local port nobody listens on: connection refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", base)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return base


def sid() -> str:
    return f"s-retry-{uuid.uuid4().hex[:10]}"


async def model_call_options(client: Client, session: str) -> list[tuple[timedelta, int]]:
    """Each model call's (schedule-to-close timeout, maximum attempts), from the history."""
    found = []
    async for event in client.get_workflow_handle(session).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "keel.model.converse":
                found.append(
                    (
                        scheduled.schedule_to_close_timeout.ToTimedelta(),
                        scheduled.retry_policy.maximum_attempts,
                    )
                )
    return found


def test_the_default_bound_is_ten_minutes() -> None:
    assert DEFAULT_MODEL_RETRY_S == 600
    assert SessionConfig(model="openai:m").model_retry_s == 600
    assert SessionConfig(model="openai:m", model_retry_s=None).model_retry_s is None
    with pytest.raises(ValueError, match="greater than 0"):
        SessionConfig(model="openai:m", model_retry_s=0)


async def test_an_unreachable_server_is_retried_until_the_bound_then_the_turn_fails(
    keel: KeelClient, client: Client, run_worker: RunWorker, nothing_there: str
) -> None:
    session = sid()
    config = SessionConfig(model="openai:llama-test", model_retry_s=4)
    async with run_worker():
        started = time.monotonic()
        record = await keel.run(session, "hello?", config=config, timeout_s=60)
        took = time.monotonic() - started
    assert record.status == "failed"
    error = record.error or ""
    assert error.startswith(f"model server {nothing_there} (model 'llama-test') unreachable")
    # backoff 0.25, 0.5, 1, 2 s: the 4th or 5th attempt is the last to start within 4 s on
    # an idle machine; a loaded one (each attempt's task waits for a worker) fits fewer
    said = re.search(r"\(connection refused\); gave up after (\d) attempts in (\d) s", error)
    assert said is not None and 2 <= int(said.group(1)) <= 5 and int(said.group(2)) <= 4, error
    assert error.endswith(" s (model_retry_s: 4 s)") and "\n" not in error
    assert 2 < took < 20, took  # about 3.75 s idle; a loaded machine gives up sooner
    assert await model_call_options(client, session) == [(timedelta(seconds=4), 0)]


async def test_a_call_still_running_at_the_bound_is_cut_and_said_so(
    keel: KeelClient, client: Client, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Reply(text="too late", delay_s=15))
    session = sid()
    config = SessionConfig(model="openai:llama-test", model_retry_s=2)
    async with run_worker():
        started = time.monotonic()
        record = await keel.run(session, "hello?", config=config, timeout_s=60)
        took = time.monotonic() - started
    assert record.status == "failed"
    assert record.error == (
        "the model did not answer within 2 s, retries included (model_retry_s)"
    ), record.error
    assert took < 12, took
    assert len(openai.requests) == 1


async def test_an_answer_retrying_cannot_fix_fails_at_once_whatever_the_bound(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Failure(401, "Incorrect API key provided"))
    session = sid()
    config = SessionConfig(model="openai:llama-test")  # the default bound, 10 minutes
    async with run_worker():
        started = time.monotonic()
        record = await keel.run(session, "hello?", config=config, timeout_s=60)
        took = time.monotonic() - started
    assert record.status == "failed" and "Incorrect API key provided" in (record.error or "")
    assert took < 10 and len(openai.requests) == 1
