"""A server's ``Retry-After`` on a 429 or 503 is the next attempt's delay, within model_retry_s.

Real Temporal dev server, a real worker, and local fakes speaking the wire formats (an
OpenAI-compatible server, Bedrock Runtime through real boto3). Each fake records when each
request arrived: the gap between the refused attempt and the next is measured there. Without
``Retry-After`` Temporal's backoff would retry after 0.25 s.
"""

from __future__ import annotations

import email.utils
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keel import KeelClient, SessionConfig
from keel.activities.models.retry_after import retry_after_s
from tests.fakes import bedrock_server
from tests.fakes.bedrock_server import FakeBedrock, HttpError, fake_bedrock_env
from tests.fakes.openai_server import Failure, FakeOpenAIServer, Reply
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import text

WAIT_S = 3


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A fake server; the in-process worker's provider reads OPENAI_BASE_URL per call."""
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield server


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    with fake_bedrock_env(monkeypatch, tmp_path) as server:
        yield server


def sid() -> str:
    return f"s-ra-{uuid.uuid4().hex[:10]}"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert retry_after_s("4") == 4.0
    assert retry_after_s(" 120 ") == 120.0
    later = email.utils.format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_s(later, now=now) == 7.0
    earlier = email.utils.format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert retry_after_s(earlier, now=now) == 0.0
    for nonsense in (None, "", "soon", "-3", "1.5e3"):
        assert retry_after_s(nonsense) is None


@pytest.mark.parametrize(("status", "form"), [(429, "seconds"), (503, "date")])
async def test_openai_retry_after_delays_the_next_attempt(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer, status: int, form: str
) -> None:
    if form == "seconds":
        header = str(WAIT_S)
    else:  # a date has whole seconds: one more, so that the wait is at least WAIT_S
        when = datetime.now(UTC) + timedelta(seconds=WAIT_S + 1)
        header = email.utils.format_datetime(when, usegmt=True)
    openai.enqueue(Failure(status, "slow down", retry_after=header), Reply(text="after the wait"))
    config = SessionConfig(model="openai:m?stream=false")
    async with run_worker():
        record = await keel.run(sid(), "hello", config=config, timeout_s=60)
    assert record.status == "completed", record
    assert record.message is not None and record.message.content[0].text == "after the wait"
    first, second = openai.requests
    if form == "seconds":
        assert second.at - first.at >= WAIT_S, second.at - first.at
    else:  # not before the date it named (whole seconds), however late the first call came
        named = when.replace(microsecond=0).timestamp()
        assert second.wall >= named, (second.wall, named)
        assert second.at - first.at >= 1, second.at - first.at


async def test_a_429_without_retry_after_keeps_the_backoff(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Failure(429, "slow down"), Reply(text="soon"))
    async with run_worker():
        record = await keel.run(sid(), "hello", config=SessionConfig(model="openai:m"))
    assert record.status == "completed", record
    first, second = openai.requests
    assert second.at - first.at < 2


async def test_a_retry_after_past_model_retry_s_ends_the_call_now(
    keel: KeelClient, run_worker: RunWorker, openai: FakeOpenAIServer
) -> None:
    openai.enqueue(Failure(429, "quota used up", retry_after="3600"), Reply(text="never"))
    config = SessionConfig(model="openai:m", model_retry_s=20)
    async with run_worker():
        started = time.monotonic()
        record = await keel.run(sid(), "hello", config=config, timeout_s=60)
        took = time.monotonic() - started
    assert record.status == "failed", record
    assert record.error is not None
    assert "HTTP 429: quota used up" in record.error
    assert "the server asked to wait 3600 s more (Retry-After)" in record.error
    assert "gave up after 1 attempts" in record.error
    assert len(openai.requests) == 1 and openai.remaining == 1
    assert took < 20  # not an hour, and not model_retry_s either


async def test_bedrock_throttling_retry_after_delays_the_next_attempt(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(
        HttpError(429, "ThrottlingException", "Too many requests", retry_after=str(WAIT_S)),
        bedrock_server.Reply([text("after the wait")]),
    )
    config = SessionConfig(model="bedrock:anthropic.claude-test")
    async with run_worker():
        record = await keel.run(sid(), "hello", config=config, timeout_s=60)
    assert record.status == "completed", record
    first, second = bedrock.requests
    assert second.at - first.at >= WAIT_S, second.at - first.at
