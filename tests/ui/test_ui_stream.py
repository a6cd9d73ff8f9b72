"""The session page shows the text a model streams as it comes; steer and cancel from the page.

A stand-in model activity heartbeats text the test sets and never answers (as in
``tests/worker/test_cli_stream.py``), so what the page shows is deterministic.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers.browser import Page
from worker.client import KeelClient
from worker.process.sandbox import sandbox_runner
from worker.ui import KeelSource, create_app, ui_running
from workflows.activity_contracts import ModelRequest, ModelResponse
from workflows.activity_options import MODEL_ACTIVITY
from workflows.contracts import SessionConfig
from workflows.session import AgentSession


class StreamingModel:
    """Heartbeats ``text`` until cancelled."""

    def __init__(self) -> None:
        self.text = ""

    @activity.defn(name=MODEL_ACTIVITY)
    async def converse(self, request: ModelRequest) -> ModelResponse:
        while True:  # heartbeats deliver the cancellation too
            activity.heartbeat({"text_chars": len(self.text), "events": 1, "text": self.text})
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

        await page.fill("#steer-text", "keep it short")
        await page.click("form.steer button")
        await page.wait_text("#notice", "Guidance queued for turn 1")
        await page.click("form.cancel button")
        await page.wait_text("#part-usage", "cancelled")
        hidden = "return document.getElementById('stream').hidden"
        await page.wait(lambda driver: driver.execute_script(hidden), "the stream box to hide")
        assert (await keel.turn(session, 1)).status == "cancelled"
        assert "No turn is running" in await page.text("#part-controls")
