"""The session page shows the text a model streams as it comes; steer and cancel from the page.

Real boto3 streams from the fake Bedrock at a fixed rate through a real worker, whose stream
endpoint the page's server reads (``SessionReader.model_text``): the browser shows every
character, in order. For the heartbeat fallback, a stand-in model activity heartbeats text
the test sets, advertises no endpoint and never answers (as in
``tests/worker/cli/test_cli_stream.py``), so what the page shows is deterministic.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keel import AgentSession, KeelClient, SessionConfig
from keel.worker.process.sandbox import sandbox_runner
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.activity_options import MODEL_ACTIVITY
from tests.fakes.bedrock_server import FakeBedrock, Reply, fake_bedrock_env
from tests.helpers.browser import Page
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import text

WORDS = 60
ANSWER = "".join(f"w{i:03d} " for i in range(WORDS))  # 5 characters a word
BEDROCK = SessionConfig(model="bedrock:anthropic.claude-test")

# Records every text the stream box shows, from now on, in window.shown.
RECORD_SHOWN = """
const el = document.getElementById('stream-text');
window.shown = [el.textContent];
new MutationObserver(function () { window.shown.push(el.textContent); })
  .observe(el, {childList: true, characterData: true, subtree: true});
"""


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeBedrock]:
    with fake_bedrock_env(monkeypatch, tmp_path) as server:
        yield server


async def no_tasks_of(session: str, timeout_s: float = 10.0) -> None:
    """Wait until the page's server runs no task for the session's live stream."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        left = [t.get_name() for t in asyncio.all_tasks() if t.get_name().endswith(f":{session}")]
        if not left:
            return
        assert loop.time() < deadline, f"tasks left running: {left}"
        await asyncio.sleep(0.1)


async def test_the_page_shows_every_character_in_order_then_the_message(
    browser: Any, keel: KeelClient, run_worker: RunWorker, bedrock: FakeBedrock
) -> None:
    # a quick first turn starts the session; the second streams 60 deltas of 5 characters,
    # one every 0.05 s, while the page watches from before it starts
    bedrock.script(Reply([text("ready")]), Reply([text(ANSWER)], text_deltas=WORDS, pace_s=0.05))
    session = f"ui-text-{uuid.uuid4().hex[:8]}"
    async with run_worker(), ui_running(create_app(KeelSource(keel)), "127.0.0.1", 0) as url:
        assert (await keel.run(session, "hi", config=BEDROCK, timeout_s=30)).status == "completed"
        page = Page(browser, url)
        await page.open(f"/sessions/{session}")
        await page.wait_text("#part-conversation", "ready")
        await page.script(RECORD_SHOWN)
        await keel.prompt(session, "go")
        assert (await keel.wait_turn(session, 2, timeout_s=30)).status == "completed"
        await page.wait_text("#part-conversation", ANSWER.strip())
        hidden = "return document.getElementById('stream').hidden"
        await page.wait(lambda driver: driver.execute_script(hidden), "the stream box to hide")
        shown = [s for s in await page.script("return window.shown") if s]
        # only ever the answer's beginning, growing, until the whole answer
        assert all(ANSWER.startswith(s) for s in shown), shown
        assert [len(s) for s in shown] == sorted(len(s) for s in shown), shown
        assert shown[-1] == ANSWER, shown
        # chunk by chunk (about one a delta), not heartbeat snapshots (about one a second)
        assert len(shown) > 12, shown
        assert await page.text("#stream-text") == ""

        # the session stops: the page hears the end, and the server's tasks stop with it
        await keel.close(session)
        await page.wait_text("#part-status", "closed")
        await no_tasks_of(session)


class StreamingModel:
    """Heartbeats ``text`` (the tail of ``chars`` characters, by default all) until cancelled."""

    def __init__(self) -> None:
        self.text = ""
        self.chars: int | None = None

    @activity.defn(name=MODEL_ACTIVITY)
    async def converse(self, request: ModelRequest) -> ModelResponse:
        while True:  # heartbeats deliver the cancellation too
            chars = len(self.text) if self.chars is None else self.chars
            activity.heartbeat({"text_chars": chars, "events": 1, "text": self.text})
            await asyncio.sleep(0.1)


async def test_streamed_text_then_steer_and_cancel_from_the_page(
    browser: Any, temporal_env: WorkflowEnvironment
) -> None:
    client, queue = temporal_env.client, f"keel-ui-stream-{uuid.uuid4().hex[:8]}"
    model = StreamingModel()
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[AgentSession],
        activities=[model.converse],
        workflow_runner=sandbox_runner(),
        max_heartbeat_throttle_interval=timedelta(seconds=0.3),
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    keel = KeelClient(client, queue)
    session = f"ui-stream-{uuid.uuid4().hex[:8]}"
    async with worker, ui_running(create_app(KeelSource(keel)), "127.0.0.1", 0) as url:
        await keel.prompt(session, "write", config=SessionConfig(model="scripted:unused.json"))
        page = Page(browser, url)
        await page.open(f"/sessions/{session}")
        await page.wait_text("#part-status", "turn 1 is running")
        model.text = "Dear team, the"
        await page.wait_text("#stream-text", "Dear team, the")
        model.text = "Dear team, the invoice"
        await page.wait_text("#stream-text", "Dear team, the invoice")
        # more than a snapshot's tail came in between: the page marks what it missed
        model.text, model.chars = "Kind regards", 22 + 100 + 12
        await page.wait_text("#stream-text", "Dear team, the invoice…Kind regards")

        await page.fill("#steer-text", "keep it short")
        await page.click("form.steer button")
        await page.wait_text("#notice", "Guidance queued for turn 1")
        await page.click("form.cancel button")
        await page.wait_text("#part-usage", "cancelled")
        hidden = "return document.getElementById('stream').hidden"
        await page.wait(lambda driver: driver.execute_script(hidden), "the stream box to hide")
        assert (await keel.turn(session, 1)).status == "cancelled"
        assert "No turn is running" in await page.text("#part-controls")
        # the browser leaves: the stream's tasks on the page's server are cancelled
        await page.open("/")
        await no_tasks_of(session)
