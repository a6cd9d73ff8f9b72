"""The page's budget: a turn parked on a session budget is shown, and the form raises it."""

from __future__ import annotations

import uuid
from pathlib import Path

from keel import KeelClient
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text
from tests.helpers.ui_http import call, cookie_of, csrf_of


async def test_the_page_raises_a_session_budget_and_the_parked_turn_goes_on(
    ui_url: str, ui_keel: KeelClient, script: Script, tmp_path: Path
) -> None:
    session = f"ui-budget-{uuid.uuid4().hex[:8]}"
    config = script(
        [respond(text("one"), tokens=10), respond(text("two"), tokens=10)],
        max_session_tokens=20,
    )
    first = await ui_keel.run(session, "first", config=config, timeout_s=30)
    assert first.status == "completed"
    second = await ui_keel.run(session, "second", timeout_s=30)
    assert second.status == "awaiting_human"
    page = await call(ui_url, f"/sessions/{session}")
    assert "Reached a <code>budget</code>: spend more?" in page.body or "budget" in page.body
    assert 'action="/sessions/' + session + '/budget"' in page.body
    headers = {"Cookie": cookie_of(page), "Accept": "application/json"}
    bad = await call(
        ui_url,
        f"/sessions/{session}/budget",
        method="POST",
        form={"csrf": csrf_of(page.body), "tokens": "-5"},
        headers=headers,
    )
    assert bad.status == 400 and "more than 0" in bad.body
    done = await call(
        ui_url,
        f"/sessions/{session}/budget",
        method="POST",
        form={"csrf": csrf_of(page.body), "tokens": "500", "approver": "ana"},
        headers=headers,
    )
    assert done.status == 200 and "Session budget now 500 tokens" in done.body, done.body
    finished = await ui_keel.wait_turn(session, 2, timeout_s=30)
    assert finished.status == "completed", finished
