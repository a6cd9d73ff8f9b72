"""Session ids on the page: one with ``/`` (a sub-agent's) has a page, a stream and working
forms; one a shell would run is shown quoted in the command the page offers to copy."""

from __future__ import annotations

import asyncio
import html
import http.client
import re
import shlex
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

from keel import KeelClient
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.shell import run_copied
from tests.helpers.ui_http import call, cookie_of, csrf_of


async def first_events(url: str, path: str, wanted: str) -> tuple[int, str, str]:
    """GET a server-sent stream; its status, content type, and what came until ``wanted``."""
    parts = urlsplit(url)

    def read() -> tuple[int, str, str]:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request("GET", path)
        response = conn.getresponse()
        seen = ""
        if response.status == 200:
            while wanted not in seen:
                line = response.readline().decode()
                assert line, seen
                seen += line
        conn.close()
        return response.status, response.getheader("content-type") or "", seen

    return await asyncio.to_thread(read)


async def test_a_session_with_a_slash_has_a_page_a_stream_and_working_forms(
    ui_url: str, ui_keel: KeelClient, script: Script
) -> None:
    child = f"ui-paths-{uuid.uuid4().hex[:8]}/agent-0123456789ab"
    config = script(
        [
            respond(text("echoing"), tool_use("t1", "echo", text="hi"), stop="tool_use"),
            respond(text("echoed")),
        ],
        approval_tools=["echo"],
    )
    record = await ui_keel.run(child, "echo hi", config=config, timeout_s=30)
    [interrupt] = record.interrupts

    listed = await call(ui_url, "/")
    assert f'href="/sessions/{child}"' in listed.body
    page = await call(ui_url, f"/sessions/{child}")
    assert page.status == 200, page.body
    assert f"<code>{child}</code>" in page.body and f'value="{interrupt.id}"' in page.body
    found = re.search(r'<form method="post" action="([^"]+)" data-ajax class="decide">', page.body)
    assert found is not None, page.body
    action = html.unescape(found.group(1))
    assert action == f"/sessions/{child}/decide"

    live = re.search(r'data-live="([^"]+)"', page.body)
    assert live is not None and live.group(1) == f"/live/sessions/{child}"
    status, kind, events = await first_events(ui_url, live.group(1), interrupt.id)
    assert status == 200 and kind.startswith("text/event-stream") and interrupt.id in events

    form = {
        "csrf": csrf_of(page.body),
        "interrupt": interrupt.id,
        "decision": "approve",
        "approver": "ana",
    }
    cookie = {"Cookie": cookie_of(page)}
    done = await call(
        ui_url, action, method="POST", form=form, headers={**cookie, "Accept": "application/json"}
    )
    assert done.status == 200 and done.json()["ok"] is True, done.body
    final = await ui_keel.wait_turn(child, record.turn_id, timeout_s=30)
    assert final.status == "completed"
    # without the page's script, the form's answer leads back to the child's page
    again = await call(ui_url, action, method="POST", form=form, headers=cookie)
    assert again.status == 303 and again.headers["location"] == f"/sessions/{child}"
    back = await call(ui_url, again.headers["location"], headers={"Cookie": cookie_of(again)})
    assert back.status == 200 and "no longer pending" in back.body


async def test_the_page_quotes_the_command_it_offers(
    ui_url: str, ui_keel: KeelClient, script: Script, tmp_path: Path
) -> None:
    # Keel's CLI refuses such an id; a Python client or a raw Temporal client may choose it.
    session = f"ui it's $(touch PWNED) {uuid.uuid4().hex[:6]}"
    await ui_keel.run(session, "hi", config=script([respond(text("hello"))]), timeout_s=30)

    page = await call(ui_url, f"/sessions/{quote(session, safe='/')}")
    assert page.status == 200, page.body
    found = re.search(r"<code>(keel run --session .*?)</code>", page.body)
    assert found is not None, page.body
    line = html.unescape(found.group(1))
    assert shlex.split(line) == ["keel", "run", "--session", session, "PROMPT"]
    assert run_copied(line, tmp_path) == ["run", "--session", session, "PROMPT"]
    assert not (tmp_path / "PWNED").exists()
