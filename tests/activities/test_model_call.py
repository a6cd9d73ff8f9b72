"""The model activity: where a provider and the store run, heartbeats, stalls, cancellation.

Run in temporalio's ``ActivityEnvironment`` (the activity's own context, no server), with
providers defined here and registered under test prefixes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

import keel.activities.model_call as model_call
from keel import ConversationStore, Message, text_block
from keel.activities.model_call import ModelActivities
from keel.activities.models import PROVIDERS, DeltaCallback, resolve_model
from keel.workflows.activity_contracts import ModelRequest, ModelResponse

# What the providers below saw, by test: thread idents, deltas, cancellations.
SEEN: dict[str, Any] = {}


def _answer(text: str = "hi") -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", content=[text_block(text)]), stopReason="end_turn"
    )


class AsyncProbe:
    """An async provider: notes its thread; ``probe-async:stall`` stalls after one delta."""

    def __init__(self, mode: str, environ: object = None) -> None:
        self.mode = mode

    async def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        SEEN["provider_thread"] = threading.get_ident()
        SEEN["messages"] = len(request.messages)
        if self.mode == "stall":
            on_delta("started")
            await asyncio.sleep(30)
        if self.mode == "slow":
            for part in ("one ", "two ", "three"):
                on_delta(part)
                await asyncio.sleep(0.1)
        if self.mode == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                SEEN["cancelled"] = True
                raise
        return _answer()


class SyncProbe:
    """A blocking provider: notes its thread; ``probe-sync:stall`` stalls after one delta."""

    def __init__(self, mode: str, environ: object = None) -> None:
        self.mode = mode

    def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        SEEN["provider_thread"] = threading.get_ident()
        if self.mode == "stall":
            on_delta("started")
            time.sleep(1.5)
        return _answer()


class _Backend:
    """An in-memory blob backend that notes the threads it is called from."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.threads: set[int] = set()

    def put(self, key: str, data: bytes) -> None:
        self.threads.add(threading.get_ident())
        self.blobs[key] = data

    def get(self, key: str) -> bytes:
        self.threads.add(threading.get_ident())
        return self.blobs[key]


@pytest.fixture(autouse=True)
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(PROVIDERS, "probe-async", AsyncProbe)  # type: ignore[arg-type]
    monkeypatch.setitem(PROVIDERS, "probe-sync", SyncProbe)  # type: ignore[arg-type]
    SEEN.clear()
    yield
    SEEN.clear()


def request(model: str) -> ModelRequest:
    return ModelRequest(
        session_id="s",
        turn=1,
        cycle=1,
        model=model,
        messages=[Message(role="user", content=[text_block("hello")])],
    )


@pytest.mark.parametrize(
    ("model", "provider_on_loop"), [("probe-async:", True), ("probe-sync:", False)]
)
async def test_a_thread_is_taken_only_for_what_blocks(model: str, provider_on_loop: bool) -> None:
    # The store's work takes a thread, even when the store is a local directory.
    backend = _Backend()
    activities = ModelActivities(ConversationStore(backend))
    response = await ActivityEnvironment().run(activities.converse, request(model))
    loop_thread = threading.get_ident()
    assert response.message.content[0].text == "hi"
    assert response.stored is not None and response.stored.count == 1
    assert (SEEN["provider_thread"] == loop_thread) is provider_on_loop
    assert backend.threads and loop_thread not in backend.threads
    if not provider_on_loop:
        assert backend.threads == {SEEN["provider_thread"]}  # one hop, not two


async def test_the_scripted_model_is_an_async_provider() -> None:
    provider = resolve_model("scripted:any.json")
    assert asyncio.iscoroutinefunction(provider.converse)


async def test_the_scripted_model_streams_its_words_over_stream_s(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(
        '{"responses": [{"content": [{"text": "one two three four"}], "stopReason": "end_turn",'
        ' "stream_s": 0.4}]}'
    )
    provider = resolve_model(f"scripted:{script}")
    seen: list[tuple[float, str]] = []
    started = time.monotonic()
    response = await provider.converse(  # type: ignore[misc]
        request(f"scripted:{script}"), lambda text: seen.append((time.monotonic(), text))
    )
    assert [text for _, text in seen] == ["one ", "two ", "three ", "four"]
    assert response.message.content[0].text == "one two three four"
    assert seen[-1][0] - seen[0][0] >= 0.25  # spread over the time, not all at once
    assert time.monotonic() - started >= 0.4


@pytest.mark.parametrize("model", ["probe-async:stall", "probe-sync:stall"])
async def test_a_stream_that_stalls_fails_the_attempt(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_call, "HEARTBEAT_EVERY_S", 0.05)
    monkeypatch.setattr(model_call, "STREAM_STALL_S", 0.3)
    activities = ModelActivities(ConversationStore(_Backend()))
    started = time.monotonic()
    with pytest.raises(ApplicationError, match="stalled") as raised:
        await ActivityEnvironment().run(activities.converse, request(model))
    assert raised.value.type == "KeelModelStreamStalled" and not raised.value.non_retryable
    assert time.monotonic() - started < 1.2


async def test_an_async_provider_heartbeats_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_call, "HEARTBEAT_EVERY_S", 0.05)
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details[0])
    activities = ModelActivities(ConversationStore(_Backend()))
    await env.run(activities.converse, request("probe-async:slow"))
    assert beats, "no heartbeat while the provider streamed"
    texts = [b["text"] for b in beats]
    assert texts == sorted(texts, key=len) and "one" in texts[-1]


async def test_cancelling_the_activity_cancels_an_async_provider() -> None:
    env = ActivityEnvironment()
    activities = ModelActivities(ConversationStore(_Backend()))
    call = asyncio.ensure_future(env.run(activities.converse, request("probe-async:hang")))
    await asyncio.sleep(0.2)
    env.cancel()
    with pytest.raises((asyncio.CancelledError, CancelledError)):
        await asyncio.wait_for(call, 2)
    assert SEEN.get("cancelled") is True


def test_a_longer_heartbeat_timeout_means_fewer_heartbeats() -> None:
    """Three beats per timeout, at most 10 s apart: 0.67 s at 2 s, 10 s at the 30 s default."""
    from datetime import timedelta

    from keel.workflows.activity_options import HEARTBEAT_TIMEOUT, heartbeat_every_s

    every = model_call.HEARTBEAT_EVERY_S
    assert heartbeat_every_s(HEARTBEAT_TIMEOUT, every) == pytest.approx(10.0)
    assert heartbeat_every_s(timedelta(seconds=2), every) == pytest.approx(2 / 3)
    assert heartbeat_every_s(timedelta(seconds=9), every) == pytest.approx(3.0)
    assert heartbeat_every_s(timedelta(seconds=30), every) == pytest.approx(10.0)
    assert heartbeat_every_s(timedelta(seconds=600), every) == pytest.approx(10.0)
