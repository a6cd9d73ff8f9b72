"""The web page in a real browser: list, approve, deny with a reason, answer a question."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keel import KeelClient, TurnRecord
from tests.helpers.browser import Page
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use


def sid(kind: str) -> str:
    return f"ui-{kind}-{uuid.uuid4().hex[:8]}"


async def waiting(keel: KeelClient, session: str, config: Any) -> TurnRecord:
    record = await keel.run(session, "tidy up", config=config, timeout_s=30)
    assert record.status == "awaiting_human", record
    return record


async def test_approve_from_the_list_without_reload(
    page: Page, ui_keel: KeelClient, script: Script, screenshot_path: Path
) -> None:
    # the session's policy asks a person before a transfer over 1000 (tests/sample_tools.py)
    asked = tool_use("t1", "transfer", amount=2500, to="acme-supplies")
    config = script(
        [
            respond(text("The Acme invoice is 2,500; paying it."), asked, stop="tool_use"),
            respond(text("Paid: 2,500 sent to acme-supplies.")),
        ],
        policy="payments",
    )
    quiet = script([respond(text("nothing to do"))])
    await page.open("/")
    await page.wait_text("h1", "Sessions")

    # a session that waits, then a newer one that does not: the waiting one is listed first
    session, other = sid("pay"), sid("idle")
    record = await ui_keel.run(session, "Pay the Acme invoice", config=config, timeout_s=30)
    assert record.status == "awaiting_human", record
    await ui_keel.run(other, "hello", config=quiet, timeout_s=30)
    first_row = "#part-sessions tbody tr:first-child"
    await page.wait_text("#part-sessions", other)  # the list updates without a reload
    assert session in await page.text(first_row)
    assert "1 decision" in await page.text(first_row)

    await page.click(f"{first_row} a")
    await page.wait_text("h1", session)
    shown = await page.text(".interrupt .tool-input")
    assert json.loads(shown) == {"amount": 2500, "to": "acme-supplies"}
    assert "Approve transfer?" in await page.text(".interrupt h3")
    assert "transfers over 1000 need approval" in await page.text(".interrupt .reason")
    await page.screenshot(str(screenshot_path))

    await page.script("window.keelMarker = 'same page'")
    await page.fill(".interrupt input[name=approver]", "Ana")
    await page.click(".interrupt button[value=approve]")
    await page.wait_text("#part-conversation", "Paid: 2,500 sent to acme-supplies.")
    assert await page.script("return window.keelMarker") == "same page"  # no reload
    # the live stream may show the result before the POST's answer fills the notice
    await page.wait_text("#notice", "approved as Ana")
    conversation = await page.text("#part-conversation")
    assert "Result of transfer" in conversation and "sent 2500 to acme-supplies" in conversation
    done = await ui_keel.turn(session, record.turn_id)
    assert done.status == "completed"
    state = await ui_keel.state(session)
    [decided] = [e for e in state.events if e.type == "interrupt_decided"]
    assert decided.detail["by"] == "Ana"


async def test_deny_with_a_reason_reaches_the_model(
    page: Page,
    ui_keel: KeelClient,
    script: Script,
    tmp_path: Path,
    model_log: Callable[[], list[dict[str, Any]]],
) -> None:
    target = tmp_path / "out.txt"
    asked = tool_use("g1", "guarded_record", path=str(target), value="nope")
    config = script(
        [respond(text("Recording."), asked, stop="tool_use"), respond(text("Understood."))]
    )
    session = sid("deny")
    await waiting(ui_keel, session, config)
    await page.open(f"/sessions/{session}")
    await page.wait_text(".interrupt h3", "guarded_record")
    # the name given with the previous decision is remembered by this browser's session
    assert "You decide as Ana" in await page.text("#part-pending")
    await page.fill(".interrupt textarea[name=reason]", "keep the file as it is")
    await page.click(".interrupt button[value=deny]")
    await page.wait_text("#part-conversation", "Understood.")
    assert "keep the file as it is" in await page.text("#part-conversation")
    assert not target.exists()
    last = model_log()[-1]
    assert last["session"] == session
    assert "keep the file as it is" in json.dumps(last["messages"])


async def test_answer_a_question(page: Page, ui_keel: KeelClient, script: Script) -> None:
    asked = tool_use("p1", "pick_account", query="acme")
    config = script(
        [respond(text("Which one?"), asked, stop="tool_use"), respond(text("Using it now."))]
    )
    session = sid("answer")
    await waiting(ui_keel, session, config)
    await page.open(f"/sessions/{session}")
    await page.wait_text(".interrupt h3", "pick_account asks: account")
    assert "which account matches 'acme'?" in await page.text(".interrupt .reason")
    await page.fill(".interrupt input[name=answer]", "acct-42")
    await page.click(".interrupt button[type=submit]")
    await page.wait_text("#part-conversation", "Using it now.")
    assert "using acct-42" in await page.text("#part-conversation")
    assert "Nothing waits for a decision" in await page.text("#part-pending")


async def test_approve_always_stands_and_is_listed(
    page: Page, ui_keel: KeelClient, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="1"), stop="tool_use"),
            respond(tool_use("g2", "guarded_record", path=str(target), value="2"), stop="tool_use"),
            respond(text("Both recorded.")),
        ]
    )
    session = sid("always")
    await waiting(ui_keel, session, config)
    await page.open(f"/sessions/{session}")
    await page.wait_text(".interrupt h3", "guarded_record")
    await page.click(".interrupt button[value=approve-always]")
    await page.wait_text("#part-conversation", "Both recorded.")  # the second call asked nobody
    await page.wait_text("#part-pending", "Approved always")
    assert f"keel policy {session} --revoke guarded_record" in await page.text("#part-pending")
    assert target.read_text().splitlines() == ["1", "2"]
    [standing] = await ui_keel.policy(session)
    assert standing.tool == "guarded_record"
