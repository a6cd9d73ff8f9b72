"""The page decides an unknown outcome (run again, deny, resolve) and lists the journaled calls.

The form's checks are attacked over HTTP on a real session; a resolve that goes through, signed
by the page's key, on the stand-in session (``tests/fakes/outcome_unknown_session.py``: the
contract's queries and ``decide`` update with Keel's checks), until the session's workflow side
opens such interrupts itself.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from keel.worker.signing import ApproverKey, generate_key
from keel.worker.ui.app import create_app
from keel.worker.ui.context import templates
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource, Signer
from keel.worker.ui.views import effects_table, interrupts
from keel.workflows.contracts import Decision, SessionConfig
from tests.helpers.fixture_types import Script
from tests.helpers.outcome_unknown import (
    outcome_unknown,
    records,
    stand_in_worker,
    start_stand_in,
)
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.ui_http import call, cookie_of, csrf_of


def pending_html(kind: str) -> str:
    view = type(
        "View",
        (),
        {"interrupts": interrupts([outcome_unknown(kind=kind)]), "said": [], "standing": []},
    )
    view.session = "s 1"  # type: ignore[attr-defined]
    return (
        templates()
        .get_template("_pending.html")
        .render(view=view, csrf="c", identity="ann", signs_as=None, signer=None)
    )


def test_an_unknown_outcome_has_run_again_deny_and_resolve_with_a_result() -> None:
    html = pending_html("outcome_unknown")
    assert "Did <code>refund</code> happen?" in html
    assert html.count('action="/sessions/s%201/decide"') == 2  # decide, and resolve
    assert '<button type="submit" name="decision" value="approve" class="approve">' in html
    assert "Approve (run again)</button>" in html
    assert 'value="deny"' in html and 'value="resolve"' in html
    assert '<textarea id="result-ou-1" name="result" rows="3" required>' in html
    assert "approve-always" not in html  # an approval of it cannot stand

    approval = pending_html("approval")
    assert 'value="resolve"' not in approval and 'name="result"' not in approval
    assert "Approve</button>" in approval and "run again" not in approval


def test_the_effects_table_lists_each_call() -> None:
    part = templates().get_template("_effects.html")
    html = part.render(effects=effects_table(records("s1").effects))
    assert html.count('<tr class="outcome-') == 2
    assert '<tr class="outcome-unknown">' in html
    assert "1: started 2026-12-02 10:00:00 UTC, no end recorded" in html
    assert "2: started 2026-12-02 10:01:00 UTC, returned" in html
    assert '<td data-label="Decided by">ana</td>' in html
    assert "does not list" in part.render(effects=effects_table(None))
    assert "No calls of write" in part.render(
        effects=effects_table([])
    )


async def test_the_decide_form_refuses_what_does_not_fit_before_and_at_the_session(
    ui_url: str, ui_keel: KeelClient, script: Script
) -> None:
    asked = tool_use("t1", "transfer", amount=5000, to="acme")
    config = script(
        [respond(text("paying"), asked, stop="tool_use"), respond(text("paid"))],
        policy="payments",
    )
    session = f"ui-ou-{uuid.uuid4().hex[:8]}"
    [interrupt] = (await ui_keel.run(session, "pay", config=config, timeout_s=30)).interrupts
    page = await call(ui_url, f"/sessions/{session}")
    assert page.status == 200 and 'id="part-effects"' in page.body
    headers = {"Cookie": cookie_of(page), "Accept": "application/json"}
    base = {"interrupt": interrupt.id, "approver": "ann", "csrf": csrf_of(page.body)}
    decide = f"/sessions/{session}/decide"

    async def post(**form: str) -> tuple[int, str]:
        answer = await call(ui_url, decide, method="POST", form={**base, **form}, headers=headers)
        return answer.status, str(answer.json()["message"])

    assert await post(decision="resolve") == (
        400,
        "resolve needs the tool's result: the form's 'result' is empty",
    )
    assert await post(decision="resolve", result="  \n") == (
        400,
        "resolve needs the tool's result: the form's 'result' is empty",
    )
    assert await post(decision="approve", result="paid") == (
        400,
        "a result is recorded with resolve, not approve",
    )
    assert await post(decision="approve-always", result="") == (
        400,
        "a result is recorded with resolve, not approve-always",
    )
    assert (await post(decision="settle", result="paid"))[0] == 400
    no_csrf = {**base, "csrf": "", "decision": "resolve", "result": "paid"}
    assert (await call(ui_url, decide, method="POST", form=no_csrf, headers=headers)).status == 403
    # the session's own check: an approval is not resolved
    status, message = await post(decision="resolve", result="paid")
    assert status == 409
    assert f"interrupt {interrupt.id!r} is an approval: resolve does not decide it" in message
    assert [i.id for i in (await ui_keel.pending(session)).interrupts] == [interrupt.id]
    await ui_keel.decide(session, interrupt.id, "deny", approver="ann")


async def test_resolve_from_the_page_is_signed_with_its_key(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = temporal_env.client
    queue = f"keel-ui-ou-{uuid.uuid4().hex[:8]}"
    session = f"ui-resolve-{uuid.uuid4().hex[:8]}"
    public = generate_key(tmp_path / "ana.key")
    config = SessionConfig(model="scripted:x.json", approver_keys={"ana": public})
    signer = Signer(ApproverKey.load(tmp_path / "ana.key"))
    keel = KeelClient(client, queue, query_timeout_s=10)
    async with stand_in_worker(client, queue):
        handle = await start_stand_in(
            client, queue, session, config, [outcome_unknown()], effects=records(session)
        )
        try:
            app = create_app(KeelSource(keel), signer=signer, approver="someone-else")
            async with ui_running(app, "127.0.0.1", 0) as url:
                page = await call(url, f"/sessions/{session}")
                assert page.status == 200, page.body
                assert "Approve (run again)" in page.body and 'value="resolve"' in page.body
                assert page.body.count('<tr class="outcome-') == 2  # the effects table
                form = {
                    "interrupt": "ou-1",
                    "decision": "resolve",
                    "result": "refund 7 went through: ref R-123",
                    "approver": "mallory",  # the key decides whose decision it is
                    "csrf": csrf_of(page.body),
                }
                headers = {"Cookie": cookie_of(page), "Accept": "application/json"}
                done = await call(
                    url, f"/sessions/{session}/decide", method="POST", form=form, headers=headers
                )
                assert done.status == 200, done.body
                answer = done.json()
                assert answer["message"] == (
                    "Interrupt ou-1 resolved as ana: its result is recorded."
                )
            [taken] = await handle.query("decisions", result_type=list[Decision])
            assert (taken.decision, taken.result, taken.approver) == (
                "resolve",
                "refund 7 went through: ref R-123",
                "ana",
            )
            assert taken.signature  # checked by the session's validator, over the result
        finally:
            await handle.terminate()
