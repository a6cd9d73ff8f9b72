"""An unknown outcome resolved in a real browser: the page's script posts the Resolve form.

Against the stand-in session (``tests/fakes/outcome_unknown_session.py``), until the session's
workflow side opens ``outcome_unknown`` interrupts itself.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource
from keel.workflows.contracts import Decision, SessionConfig
from tests.helpers.browser import Page
from tests.helpers.outcome_unknown import (
    outcome_unknown,
    records,
    stand_in_worker,
    start_stand_in,
)


async def test_resolve_with_a_result_from_the_page(
    browser: Any, temporal_env: WorkflowEnvironment
) -> None:
    client = temporal_env.client
    queue = f"keel-ui-ou-{uuid.uuid4().hex[:8]}"
    session = f"ui-resolve-{uuid.uuid4().hex[:8]}"
    config = SessionConfig(model="scripted:x.json", approvers=["Ana"])
    keel = KeelClient(client, queue, query_timeout_s=10)
    async with stand_in_worker(client, queue):
        handle = await start_stand_in(
            client, queue, session, config, [outcome_unknown()], effects=records(session)
        )
        try:
            async with ui_running(create_app(KeelSource(keel)), "127.0.0.1", 0) as url:
                page = Page(browser, url)
                await page.open(f"/sessions/{session}")
                await page.wait_text(".interrupt h3", "Did refund happen?")
                buttons = await page.text(".interrupt")
                for label in ("Approve (run again)", "Deny", "Resolve"):
                    assert label in buttons, buttons
                table = await page.text("#part-effects table")
                assert "unknown" in table and "retried" in table and "ana" in table

                await page.script("window.keelMarker = 'same page'")
                await page.fill(".interrupt form.resolve input[name=approver]", "Ana")
                await page.fill("#result-ou-1", "refund 7 went through: ref R-123")
                await page.click(".interrupt form.resolve button[value=resolve]")
                await page.wait_text("#notice", "resolved as Ana: its result is recorded")
                await page.wait_text("#part-pending", "Nothing waits for a decision.")
                assert await page.script("return window.keelMarker") == "same page"
            [taken] = await handle.query("decisions", result_type=list[Decision])
            assert (taken.decision, taken.result, taken.approver) == (
                "resolve",
                "refund 7 went through: ref R-123",
                "Ana",
            )
        finally:
            await handle.terminate()
