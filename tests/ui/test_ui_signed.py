"""With signed approvals, the page signs with its key (``--key``) and says as whom."""

from __future__ import annotations

import uuid
from pathlib import Path

from keel import KeelClient
from keel.worker.signing import ApproverKey, generate_key
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource, Signer
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.ui_http import call, cookie_of, csrf_of


async def test_the_page_signs_as_the_approver_whose_key_it_holds(
    ui_keel: KeelClient, ui_worker: None, script: Script, tmp_path: Path
) -> None:
    public = generate_key(tmp_path / "ana.key")
    other = generate_key(tmp_path / "bob.key")
    asked = tool_use("t1", "transfer", amount=5000, to="acme")
    config = script(
        [respond(text("paying"), asked, stop="tool_use"), respond(text("paid"))],
        policy="payments",
        approver_keys={"ana": public, "bob": other},
    )
    session = f"ui-signed-{uuid.uuid4().hex[:8]}"
    record = await ui_keel.run(session, "pay", config=config, timeout_s=30)
    [interrupt] = record.interrupts
    signer = Signer(ApproverKey.load(tmp_path / "ana.key"))

    # a page without the key cannot decide: the session refuses unsigned decisions
    async with ui_running(create_app(KeelSource(ui_keel)), "127.0.0.1", 0) as url:
        first = await call(url, f"/sessions/{session}")
        assert "this page has no key" in first.body
        form = {"interrupt": interrupt.id, "decision": "approve", "csrf": csrf_of(first.body)}
        headers = {"Cookie": cookie_of(first), "Accept": "application/json"}
        refused = await call(
            url, f"/sessions/{session}/decide", method="POST", form=form, headers=headers
        )
        assert refused.status == 409 and "wants signed approvals" in refused.body

    app = create_app(KeelSource(ui_keel), signer=signer, approver="someone-else")
    async with ui_running(app, "127.0.0.1", 0) as url:
        page = await call(url, f"/sessions/{session}")
        assert f"signed with key <code>{signer.fingerprint}</code> as <strong>ana</strong>" in (
            page.body
        )
        # the name typed in does not change whose key signs: the decision is ana's
        form = {
            "interrupt": interrupt.id,
            "decision": "approve",
            "approver": "mallory",
            "csrf": csrf_of(page.body),
        }
        headers = {"Cookie": cookie_of(page), "Accept": "application/json"}
        done = await call(
            url, f"/sessions/{session}/decide", method="POST", form=form, headers=headers
        )
        assert done.status == 200, done.body
        assert "approved as ana" in done.json()["message"]  # type: ignore[operator]
    turn = await ui_keel.wait_turn(session, record.turn_id, timeout_s=30)
    assert turn.status == "completed"
    state = await ui_keel.state(session)
    [decided] = [e for e in state.events if e.type == "interrupt_decided"]
    assert decided.detail["by"] == "ana"
