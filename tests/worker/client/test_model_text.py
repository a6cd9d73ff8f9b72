"""Streamed model text, every character in order: the worker's stream endpoint and its fallback.

Real boto3 streams from the fake Bedrock at a fixed rate, through a real worker and dev server,
to ``KeelClient.model_text``, ``keel watch`` and ``keel run --progress``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from keel import KeelClient, SessionConfig, TextChunk, open_store
from keel.activities.text_streams import TextStreams
from keel.worker.client import writing
from keel.worker.client.streams import ENDPOINT, HEARTBEAT
from keel.worker.payloads import data_converter
from keel.worker.process.assembly import build_worker
from keel.worker.process.stream_server import StreamConfig, StreamServer, stream_endpoint
from tests.fakes.bedrock_server import FakeBedrock, Reply, StreamCut, fake_bedrock_env
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.encryption import keyring_of, new_key
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import SAMPLE_TOOLS, text, tool_use

MODEL = "bedrock:anthropic.claude-test"
CONFIG = SessionConfig(model=MODEL)
WORDS = 60
ANSWER = "".join(f"w{i:03d} " for i in range(WORDS))  # 5 characters a word


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    with fake_bedrock_env(monkeypatch, tmp_path) as server:
        yield server


def paced(pace_s: float) -> Reply:
    return Reply([text(ANSWER)], text_deltas=WORDS, pace_s=pace_s)


def sid() -> str:
    return f"mt-{uuid.uuid4().hex[:10]}"


async def one_call(keel: KeelClient, session: str) -> list[TextChunk]:
    """The chunks of the session's first model call, up to its end."""
    chunks: list[TextChunk] = []

    async def collect() -> None:
        async for chunk in keel.model_text(session, poll_s=0.05):
            chunks.append(chunk)
            if chunk.end:
                return

    await asyncio.wait_for(collect(), 30)
    return chunks


async def history_bytes(client: Client, session: str) -> tuple[list[str], bytes]:
    history = await client.get_workflow_handle(session).fetch_history()
    types = [e.WhichOneof("attributes") or "" for e in history.events]
    return types, b"".join(e.SerializeToString() for e in history.events)


async def test_every_character_in_order_and_nothing_in_history(
    client: Client,
    keel: KeelClient,
    run_worker: RunWorker,
    bedrock: FakeBedrock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # both turns waited for by reading history: a wait_turn update would add its own events,
    # at a moment that differs between the two sessions
    monkeypatch.setattr(writing, "WAIT_BY_UPDATE", False)
    bedrock.script(paced(0.03), paced(0.0))
    streamed, quick = sid(), sid()
    async with run_worker():
        await keel.prompt(streamed, "go", config=CONFIG)
        chunks = await one_call(keel, streamed)
        assert (await keel.wait_turn(streamed, 1, timeout_s=30)).status == "completed"
        # the same answer in one go: the model call ends before it would heartbeat, and opens
        # no stream on the worker's endpoint
        streams = stream_endpoint(StreamConfig.from_env(os.environ))
        assert streams is not None
        held = len(streams)
        assert (await keel.run(quick, "go", config=CONFIG, timeout_s=30)).status == "completed"
        assert len(streams) == held

    assert "".join(c.text for c in chunks) == ANSWER
    assert all(c.source == ENDPOINT and c.gap == 0 for c in chunks), chunks
    offsets = [c.offset for c in chunks]
    assert offsets == sorted(offsets) and chunks[-1].end and chunks[-1].offset == len(ANSWER)
    assert {(c.turn, c.cycle) for c in chunks} == {(1, 1)}
    # Nothing of the stream entered history: the same events as the call that streamed to
    # nobody, the same size give or take timestamps, no advert or heartbeat details.
    types, raw = await history_bytes(client, streamed)
    quick_types, quick_raw = await history_bytes(client, quick)
    assert types == quick_types
    assert abs(len(raw) - len(quick_raw)) <= 64, (len(raw), len(quick_raw))
    for marker in (b"/streams/", b"text_chars"):
        assert marker not in raw


async def test_a_retry_streams_again_from_its_start(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    # The first attempt's stream breaks after 30 words; Temporal retries the call.
    bedrock.script(StreamCut(paced(0.03), after_events=31), paced(0.03))
    session = sid()
    async with run_worker():
        await keel.prompt(session, "go", config=CONFIG)
        chunks: list[TextChunk] = []
        async for chunk in keel.model_text(session, poll_s=0.05):
            chunks.append(chunk)
            if chunk.end and chunk.attempt == 2:
                break

    first = [c for c in chunks if c.attempt == 1]
    second = [c for c in chunks if c.attempt == 2]
    assert first and second and chunks.index(second[0]) > chunks.index(first[-1])
    assert ANSWER.startswith("".join(c.text for c in first))  # what it streamed, then ended
    assert first[-1].end
    # The retry starts at offset 0 with its own text, not the last attempt's (whose details
    # Temporal still shows until the retry heartbeats).
    assert second[0].offset == 0 and "".join(c.text for c in second) == ANSWER
    assert all(c.source == ENDPOINT for c in chunks)


async def test_keel_watch_and_run_progress_print_every_character(
    client: Client, keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock, task_queue: str
) -> None:
    # Two streamed calls with a tool run between: each text whole, and in its place among
    # the events. The first takes 6 s: time enough for `keel watch` to start under load.
    second = "".join(f"v{i:03d} " for i in range(30))
    first_call = Reply(
        [text(ANSWER), tool_use("t1", "echo", text="hi")],
        stop_reason="tool_use",
        text_deltas=WORDS,
        pace_s=0.1,
    )
    bedrock.script(first_call, Reply([text(second)], text_deltas=30, pace_s=0.05))
    session = sid()
    env = keel_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host, KEEL_TASK_QUEUE=task_queue
    )
    command = [sys.executable, "-m", "keel.worker.cli"]
    async with run_worker(max_cached_workflows=10):  # quick queries: this is not about replay
        run = await asyncio.create_subprocess_exec(
            *command, "run", "--session", session, "--model", MODEL, "--tools", SAMPLE_TOOLS,
            "--progress", "go",
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        for _ in range(200):  # the turn runs: watch joins mid-stream
            if bedrock.sent:
                break
            await asyncio.sleep(0.05)
        watch = await asyncio.create_subprocess_exec(
            *command, "watch", session, "--until-idle",
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        run_out, run_err = await asyncio.wait_for(run.communicate(), 60)
        watch_out, watch_err = await asyncio.wait_for(watch.communicate(), 60)

    assert run.returncode == 0, run_err.decode()
    assert watch.returncode == 0, watch_err.decode()
    assert second.strip() in run_out.decode()  # the answer, on stdout
    # A loaded machine may make a query wait 3 s, and keel say so on stderr, on its own line.
    progress = re.sub(r"(?m)^keel: waiting for a worker.*\n", "", run_err.decode())
    watched = watch_out.decode()
    for out, events in (
        (progress, ["model call 1 -> tool_use", "tool echo finished", "model call 2 -> end_turn"]),
        (watched, ["model_called", "tool_finished", "turn_ended"]),
    ):
        assert "…" not in out, out
        # each text whole, before the event that says its call ended, after those before it
        flat = " ".join(out.split())
        order = [ANSWER.strip(), events[0], events[1], second.strip(), events[2]]
        at = [flat.find(part) for part in order]
        assert -1 not in at and at == sorted(at), out
    # and the text's line ends before an event's line starts
    assert f"{ANSWER}\nmodel call 1 -> tool_use" in progress, progress
    assert "\nmodel call 2 -> end_turn" in progress, progress


async def test_unreachable_endpoint_falls_back_to_heartbeat_snapshots(
    keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    bedrock.script(paced(0.05))  # 3 s: two or three heartbeats
    session = sid()
    # The worker advertises an address nobody listens on (a reader on another network).
    unreachable = StreamConfig(listen="127.0.0.1:0", advertise="127.0.0.1:9")
    async with run_worker(stream_config=unreachable):
        await keel.prompt(session, "go", config=CONFIG)
        chunks = await one_call(keel, session)

    body = [c for c in chunks if c.text]
    assert body and all(c.source == HEARTBEAT for c in chunks), chunks
    for chunk in body:  # what arrives is the model's text, at its place, in order
        assert ANSWER[chunk.offset : chunk.offset + len(chunk.text)] == chunk.text
        assert chunk.gap >= 0
    assert [c.offset for c in body] == sorted(c.offset for c in body)
    assert chunks[-1].end


async def test_without_the_encryption_key_a_client_learns_neither_text_nor_stream(
    client: Client, task_queue: str, tmp_path: Path, bedrock: FakeBedrock
) -> None:
    keyring = keyring_of(new_key())
    sealed = Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(keyring)
    )
    store = open_store(str(tmp_path / "store"), keyring)
    keel, outsider = KeelClient(sealed, task_queue, store), KeelClient(client, task_queue)
    bedrock.script(paced(0.04))
    session = sid()
    worker = build_worker(sealed, task_queue, store=store, max_cached_workflows=0)
    async with worker:
        await keel.prompt(session, "go", config=CONFIG)
        seen: list[TextChunk] = []

        async def outside() -> None:  # a client with Temporal access but not the key
            async for chunk in outsider.model_text(session, poll_s=0.05):
                seen.append(chunk)

        spying = asyncio.create_task(outside())
        chunks: list[TextChunk] = []
        async for chunk in keel.model_text(session, poll_s=0.05):  # the key holder's view
            if not chunks:  # mid-stream: what the server holds of the running call
                description = await client.get_workflow_handle(session).describe()
                [pending] = description.raw_description.pending_activities
            chunks.append(chunk)
            if chunk.end:
                break
        spying.cancel()
        await asyncio.gather(spying, return_exceptions=True)

    assert "".join(c.text for c in chunks) == ANSWER
    assert all(c.source == ENDPOINT for c in chunks)
    assert seen == []
    [details] = pending.heartbeat_details.payloads
    assert details.metadata["encoding"] == b"binary/encrypted"
    for secret in (b"/streams/", b"w000", b"text_chars"):
        assert secret not in details.data


def test_endpoint_serves_a_stream_only_with_its_token() -> None:
    server = StreamServer(StreamConfig(listen="127.0.0.1:0")).start()
    try:
        streams: TextStreams = server.streams
        stream, advert = streams.open()
        other, _ = streams.open()
        stream.append("secret text")
        stream.close("completed")

        def get(url: str, token: str | None, offset: int = 0) -> tuple[int, str]:
            request = urllib.request.Request(f"{url}?offset={offset}")
            if token is not None:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return answer.status, answer.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, err.read().decode()

        for token in (None, "", "wrong", other.token, advert.token[:-1]):
            status, body = get(advert.url, token)
            assert status == 404 and "secret" not in body, (token, status, body)
        base = advert.url.rsplit("/", 1)[0]
        assert get(f"{base}/nope", advert.token)[0] == 404
        assert get(f"{base}/../streams/{stream.id}", None)[0] == 404
        status, body = get(advert.url, advert.token, offset=7)
        assert status == 200
        assert body == (
            'data: {"offset": 7, "text": "text"}\n\n'
            'event: end\ndata: {"chars": 11, "status": "completed"}\n\n'
        )
        assert get(advert.url, advert.token, offset=-1)[0] == 400
    finally:
        server.stop()
