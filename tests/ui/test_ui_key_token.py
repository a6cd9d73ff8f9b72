"""A page that signs needs a token, loopback included: ``keel ui --key`` makes one up.

Without it, any local process could read the page for its CSRF token, then post a decision
the page signs with the approver's key.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from keel import KeelClient
from keel.worker.signing import generate_key
from tests.helpers.cli import keel_env
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import free_port
from tests.helpers.ui_http import call, cookie_of, csrf_of


@asynccontextmanager
async def keel_ui(env: dict[str, str], *args: str) -> AsyncIterator[str]:
    """``keel ui ARGS`` on a free loopback port; the line it printed. Stopped after."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel.worker.cli",
        "ui",
        "--port",
        str(free_port()),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("Keel UI at "), line
        yield line
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


async def test_a_page_with_a_key_refuses_local_processes_without_its_token(
    ui_keel: KeelClient, ui_queue: str, ui_worker: None, script: Script, tmp_path: Path
) -> None:
    public = generate_key(tmp_path / "ana.key")
    asked = tool_use("t1", "transfer", amount=5000, to="acme")
    config = script(
        [respond(text("paying"), asked, stop="tool_use"), respond(text("paid"))],
        policy="payments",
        approver_keys={"ana": public},
    )
    session = f"ui-key-{uuid.uuid4().hex[:8]}"
    record = await ui_keel.run(session, "pay", config=config, timeout_s=30)
    [interrupt] = record.interrupts
    address = ui_keel.client.service_client.config.target_host
    store = str(ui_keel.store.backend.root)  # type: ignore[attr-defined]
    env = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=ui_queue, KEEL_STORE=store)
    async with keel_ui(env, "--key", str(tmp_path / "ana.key")) as line:
        found = re.search(r"Keel UI at (http://127\.0\.0\.1:\d+)/\?token=([\w-]+) ", line)
        assert found, line
        url, token = found.groups()
        assert len(token) >= 32 and "signs decisions with key" in line

        # the attack: a local process reads the page for a CSRF token, then posts a decision
        page = await call(url, f"/sessions/{session}")
        assert page.status == 401 and 'name="csrf"' not in page.body
        assert (await call(url, "/")).status == 401
        form = {"interrupt": interrupt.id, "decision": "approve", "csrf": "guessed"}
        posted = await call(
            url, f"/sessions/{session}/decide", method="POST", form=form,
            headers={"Accept": "application/json"},
        )  # fmt: skip
        assert posted.status == 401, posted.body
        assert [i.id for i in (await ui_keel.pending(session)).interrupts] == [interrupt.id]

        # the person who started it opens the printed link once, and decides
        traded = await call(url, f"/?token={token}")
        assert traded.status == 303
        cookie = cookie_of(traded)
        shown = await call(url, f"/sessions/{session}", headers={"Cookie": cookie})
        assert shown.status == 200, shown.body
        form["csrf"] = csrf_of(shown.body)
        headers = {"Cookie": cookie, "Accept": "application/json"}
        done = await call(
            url, f"/sessions/{session}/decide", method="POST", form=form, headers=headers
        )
        assert done.status == 200, done.body
        assert "approved as ana" in done.json()["message"]  # type: ignore[operator]
    turn = await ui_keel.wait_turn(session, record.turn_id, timeout_s=30)
    assert turn.status == "completed"

    # with KEEL_UI_TOKEN given, that token guards it and none is printed
    given = keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=ui_queue, KEEL_UI_TOKEN="x" * 40)
    async with keel_ui(given, "--key", str(tmp_path / "ana.key")) as line:
        assert "?token=$KEEL_UI_TOKEN" in line and "x" * 40 not in line
        url = line.split()[3]
        assert (await call(url, "/")).status == 401
        assert (await call(url, "/", headers={"Authorization": "Bearer " + "x" * 40})).status == 200


def test_keel_dev_with_a_ui_key_and_no_token_makes_one_up(tmp_path: Path) -> None:
    """``keel dev`` builds its page the same way: a key in KEEL_UI_KEY means a token."""
    from keel import Settings
    from keel.worker.cli.ui import build_app
    from keel.worker.ui.source import KeelSource

    async def never() -> KeelClient:
        raise AssertionError("not connected in this test")

    generate_key(tmp_path / "ana.key")
    source = KeelSource(connect=never, where="127.0.0.1:1")
    signing = build_app(Settings(None, ui_key=str(tmp_path / "ana.key")), source, None)
    assert signing.login.startswith("?token=") and len(signing.login) > 40
    assert signing.link("http://127.0.0.1:8234") == "http://127.0.0.1:8234/" + signing.login
    again = build_app(Settings(None, ui_key=str(tmp_path / "ana.key")), source, None)
    assert again.login != signing.login  # random per run
    plain = build_app(Settings(None), source, None)
    assert plain.login == "" and plain.link("http://x") == "http://x"
    assert "this machine only" in plain.guard
