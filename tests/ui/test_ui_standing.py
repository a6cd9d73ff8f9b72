"""The page's **Approve always**: a standing approval, listed with how to revoke it (issue 35)."""

from __future__ import annotations

import uuid
from pathlib import Path

from keel import KeelClient
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.ui_http import call, cookie_of, csrf_of


async def test_approve_always_stands_for_the_tools_next_calls(
    ui_url: str, ui_keel: KeelClient, script: Script, tmp_path: Path
) -> None:
    session = f"ui-always-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(out), value="1"), stop="tool_use"),
            respond(tool_use("g2", "guarded_record", path=str(out), value="2"), stop="tool_use"),
            respond(text("done")),
        ]
    )
    record = await ui_keel.run(session, "go", config=config, timeout_s=30)
    [interrupt] = record.interrupts
    page = await call(ui_url, f"/sessions/{session}")
    assert 'value="approve-always"' in page.body
    form = {
        "csrf": csrf_of(page.body),
        "interrupt": interrupt.id,
        "decision": "approve-always",
        "approver": "ana",
    }
    done = await call(
        ui_url,
        f"/sessions/{session}/decide",
        method="POST",
        form=form,
        headers={"Cookie": cookie_of(page), "Accept": "application/json"},
    )
    assert done.status == 200, done.body
    finished = await ui_keel.wait_turn(session, record.turn_id, timeout_s=30)
    assert finished.status == "completed", finished  # the second call did not ask
    assert out.read_text().splitlines() == ["1", "2"]
    [standing] = await ui_keel.policy(session)
    assert standing.tool == "guarded_record" and standing.granted_by == "ana"
    shown = await call(ui_url, f"/sessions/{session}")
    assert "Approved always" in shown.body
    assert f"keel policy {session} --revoke guarded_record" in shown.body
