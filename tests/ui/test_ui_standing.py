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


async def test_approve_always_with_bounds_on_the_page(
    ui_url: str, ui_keel: KeelClient, script: Script, tmp_path: Path
) -> None:
    """The form's bounds (issue 44): at most 2 later calls; the list shows what is left."""
    session = f"ui-bounds-{uuid.uuid4().hex[:8]}"
    out, note = tmp_path / "out.txt", tmp_path / "note.txt"

    def record(v: str) -> dict[str, object]:
        return respond(tool_use(f"g{v}", "guarded_record", path=str(out), value=v), stop="tool_use")

    config = script(
        [
            record("1"),
            record("2"),
            respond(tool_use("n", "guarded_note", path=str(note), value="n"), stop="tool_use"),
            record("3"),
            record("4"),
            respond(text("done")),
        ]
    )
    first = await ui_keel.run(session, "go", config=config, timeout_s=30)
    [interrupt] = first.interrupts
    page = await call(ui_url, f"/sessions/{session}")
    assert 'name="max_uses"' in page.body and 'name="total"' in page.body
    form = {
        "csrf": csrf_of(page.body),
        "interrupt": interrupt.id,
        "approver": "ana",
        "max_uses": "2",
        "for_minutes": "60",
    }
    headers = {"Cookie": cookie_of(page), "Accept": "application/json"}
    path = f"/sessions/{session}/decide"
    plain = await call(
        ui_url, path, method="POST", form={**form, "decision": "approve"}, headers=headers
    )
    assert plain.status == 400 and "bounds are for Approve always" in plain.body, plain.body
    done = await call(
        ui_url, path, method="POST", form={**form, "decision": "approve-always"}, headers=headers
    )
    assert done.status == 200, done.body
    waiting = await ui_keel.wait_turn(session, first.turn_id, timeout_s=30)
    [asking] = waiting.interrupts
    assert asking.tool_use.name == "guarded_note"
    shown = await call(ui_url, f"/sessions/{session}")
    assert "1 of 2 uses left, expires in" in shown.body
    await ui_keel.decide(session, asking.id, "approve")
    last = await ui_keel.wait_turn(session, first.turn_id, timeout_s=30)
    assert [i.tool_use.input["value"] for i in last.interrupts] == ["4"]
    assert out.read_text().splitlines() == ["1", "2", "3"]
    assert await ui_keel.policy(session) == []
