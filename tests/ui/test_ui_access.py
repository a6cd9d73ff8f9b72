"""The page's access rules, attacked over HTTP: token, cookie, CSRF, Host; and its errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from keel import KeelClient
from keel.worker.process.configured import TemporalUnreachable
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource
from tests.helpers.cli import keel_env
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import free_port
from tests.helpers.ui_http import call, cookie_of, csrf_of

TOKEN = "a-long-random-ui-token"


@pytest.fixture(scope="module")
async def token_url(ui_keel: KeelClient, ui_worker: None) -> AsyncIterator[str]:
    """The page with KEEL_UI_TOKEN set."""
    async with ui_running(create_app(KeelSource(ui_keel), token=TOKEN), "127.0.0.1", 0) as url:
        yield url


async def pending_session(keel: KeelClient, script: Script) -> tuple[str, str]:
    asked = tool_use("t1", "transfer", amount=5000, to="acme")
    config = script(
        [respond(text("paying"), asked, stop="tool_use"), respond(text("paid"))],
        policy="payments",
    )
    session = f"ui-access-{uuid.uuid4().hex[:8]}"
    record = await keel.run(session, "pay", config=config, timeout_s=30)
    [interrupt] = record.interrupts
    return session, interrupt.id


async def test_the_token_once_becomes_a_strict_http_only_cookie(token_url: str) -> None:
    assert (await call(token_url, "/")).status == 401
    assert (await call(token_url, "/?token=wrong")).status == 401
    assert (await call(token_url, "/static/ui.js")).status == 401

    traded = await call(token_url, "/sessions/x?token=" + TOKEN + "&tab=1")
    assert traded.status == 303
    assert traded.headers["location"] == "/sessions/x?tab=1"  # the token leaves the URL
    [cookie] = traded.cookies
    flags = {f.strip().lower() for f in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    assert TOKEN not in cookie

    listed = await call(token_url, "/", headers={"Cookie": cookie_of(traded)})
    assert listed.status == 200 and "<h1>Sessions</h1>" in listed.body
    assert listed.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in listed.headers["content-security-policy"]
    bearer = await call(token_url, "/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status == 200
    forged = cookie_of(traded)[:-3] + "AAA"  # the signature no longer matches
    assert (await call(token_url, "/", headers={"Cookie": forged})).status == 401


async def test_posts_need_credentials_and_the_csrf_token(
    token_url: str, ui_keel: KeelClient, script: Script
) -> None:
    session, interrupt = await pending_session(ui_keel, script)
    decide = f"/sessions/{session}/decide"
    form = {"interrupt": interrupt, "decision": "approve", "approver": "mallory"}
    json_accept = {"Accept": "application/json"}

    # no credentials at all: 401, even with a CSRF token made up
    nobody = await call(token_url, decide, method="POST", form={**form, "csrf": "x"})
    assert nobody.status == 401
    # signed in (the cookie), but the CSRF token is missing or wrong: 403
    page = await call(token_url, f"/sessions/{session}?token={TOKEN}")
    cookie = cookie_of(page)
    opened = await call(token_url, f"/sessions/{session}", headers={"Cookie": cookie})
    csrf = csrf_of(opened.body)
    assert f'value="{interrupt}"' in opened.body
    for bad in ({}, {"csrf": ""}, {"csrf": csrf[:-1] + "x"}):
        refused = await call(
            token_url, decide, method="POST", form={**form, **bad}, headers={"Cookie": cookie}
        )
        assert refused.status == 403, refused.body
    # the bearer token alone is credentials, but carries no CSRF token either: 403
    bearer = {"Authorization": f"Bearer {TOKEN}", **json_accept}
    assert (await call(token_url, decide, method="POST", form=form, headers=bearer)).status == 403
    # a GET does not decide anything: it asks for the page of a session "<id>/decide"
    assert (await call(token_url, decide, headers={"Cookie": cookie})).status == 404

    # nothing was decided by any of those
    assert [i.id for i in (await ui_keel.pending(session)).interrupts] == [interrupt]

    good = {**form, "csrf": csrf}
    headers = {"Cookie": cookie, **json_accept}
    done = await call(token_url, decide, method="POST", form=good, headers=headers)
    assert done.status == 200 and done.json()["ok"] is True, done.body
    # the same decision again lost the race: 409, why, and the page as it is now
    again = await call(token_url, decide, method="POST", form=good, headers=headers)
    assert again.status == 409
    answer = again.json()
    assert "no longer pending: it was approved" in str(answer["message"])
    assert isinstance(answer["parts"], dict) and "pending" in answer["parts"]
    # the state's event number the parts show: the page applies no answer older than its view
    assert isinstance(answer["seq"], int) and answer["seq"] > 0


async def test_without_a_token_only_loopback_names_are_served(ui_url: str) -> None:
    port = urlsplit(ui_url).port
    assert (await call(ui_url, "/", headers={"Host": f"localhost:{port}"})).status == 200
    rebound = await call(ui_url, "/", headers={"Host": f"attacker.example:{port}"})
    assert rebound.status == 421 and "loopback" in rebound.body
    # without a session cookie there are no credentials to post with
    no_session = await call(ui_url, "/name", method="POST", form={"approver": "x", "csrf": "y"})
    assert no_session.status == 401
    # saving a name goes back to a page of this site only
    first = await call(ui_url, "/")
    for back in ("//attacker.example/", "/\\attacker.example/"):
        form = {"approver": "Ana", "csrf": csrf_of(first.body), "back": back}
        saved = await call(
            ui_url, "/name", method="POST", form=form, headers={"Cookie": cookie_of(first)}
        )
        assert saved.status == 303 and saved.headers["location"] == "/"
    named = await call(ui_url, "/", headers={"Cookie": cookie_of(saved)})
    assert 'name="approver" value="Ana"' in named.body


async def test_temporal_unreachable_is_a_banner() -> None:
    async def down() -> KeelClient:
        raise TemporalUnreachable("cannot reach Temporal at 127.0.0.1:1: connection refused")

    app = create_app(KeelSource(connect=down, where="127.0.0.1:1"))
    async with ui_running(app, "127.0.0.1", 0) as url:
        page = await call(url, "/")
        session = await call(url, "/sessions/s1")
    assert page.status == 503 and session.status == 503
    for answer in (page, session):
        assert 'role="alert">Temporal is unreachable: cannot reach Temporal at 127.0.0.1:1' in (
            answer.body
        )
        assert "Traceback" not in answer.body


def test_keel_ui_refuses_other_addresses_without_a_token() -> None:
    env = keel_env()
    env.pop("KEEL_UI_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "keel.worker.cli", "ui", "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "set KEEL_UI_TOKEN" in done.stderr and done.stderr.count("\n") == 1


async def test_keel_ui_serves_the_sessions_of_the_task_queue(
    ui_keel: KeelClient, ui_queue: str, ui_worker: None, script: Script
) -> None:
    session, _ = await pending_session(ui_keel, script)
    address = ui_keel.client.service_client.config.target_host
    port = free_port()
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=ui_queue, KEEL_UI_TOKEN=TOKEN)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel.worker.cli",
        "ui",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert f"Keel UI at http://0.0.0.0:{port} (open it once with ?token=" in line, line
        url = f"http://127.0.0.1:{port}"
        listed = await call(url, "/", headers={"Authorization": f"Bearer {TOKEN}"})
        for _ in range(50):  # visibility lists a new session within a moment
            if session in listed.body:
                break
            await asyncio.sleep(0.1)
            listed = await call(url, "/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert listed.status == 200 and session in listed.body
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


async def test_a_name_saved_in_the_header_takes_the_name_out_of_the_decision_forms(
    ui_url: str, ui_keel: KeelClient, script: Script
) -> None:
    """The forms asked for a name the browser insisted on, after the header had saved one."""
    session, interrupt = await pending_session(ui_keel, script)
    first = await call(ui_url, f"/sessions/{session}")
    cookie = cookie_of(first)
    assert f'id="name-{interrupt}"' in first.body and "required" in first.body
    form = {"approver": "Ana", "csrf": csrf_of(first.body), "back": f"/sessions/{session}"}
    saved = await call(
        ui_url,
        "/name",
        method="POST",
        form=form,
        headers={"Cookie": cookie, "Accept": "application/json"},
    )
    answer = saved.json()
    assert saved.status == 200 and answer["ok"] is True, saved.body
    pending = answer["parts"]["pending"]
    assert f'id="name-{interrupt}"' not in pending
    assert "You decide as <strong>Ana</strong>" in pending
    # elsewhere than a session page, nothing to redraw
    form["back"] = "/"
    plain = await call(
        ui_url,
        "/name",
        method="POST",
        form=form,
        headers={"Cookie": cookie, "Accept": "application/json"},
    )
    assert plain.json()["parts"] is None and plain.json()["seq"] is None
    assert answer["seq"] == (await ui_keel.state(session)).event_count
