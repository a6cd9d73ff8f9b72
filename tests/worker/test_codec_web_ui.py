"""The Temporal Web UI of the CLI's dev server decodes an encrypted session, in Chromium.

A real ``temporal server start-dev`` with its UI, a Keel worker with ``KEEL_ENCRYPTION_KEY``,
a session with a known prompt, and ``keel codec-server`` in its own process, as an operator
runs them (docs/security.md). The UI gets the codec endpoint each way the docs give: typed
into the UI's own Codec Server dialog, from the dev server's ``--ui-codec-endpoint``, and
from ``keel dev --ui-codec``. The page must show the prompt and the model's answer in the
clear, its codec status must say it decoded, and no "Codec Server could not connect". The
same page with the endpoint minus its secret (all the UI can reach without an
``Authorization`` header) shows that message and no plaintext, and a page of another origin
cannot call the endpoint at all. Raw HTTP attacks: ``tests/worker/test_codec_access.py``.

Skipped without a headless Chromium unless ``KEEL_REQUIRE_BROWSER=1`` (``tests.helpers.browser``).
Screenshots go to ``KEEL_SHOTS_DIR`` when set, else to a temporary directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.worker.payloads import data_converter
from keel.worker.process.assembly import build_worker
from keel.worker.server.devserver import DevServer
from tests.helpers.browser import Page, chromium
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.encryption import history_payload_data, keyring_of, new_key
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script
from tests.helpers.temporal import free_port

PROMPT = "PROMPT-plum-7d41: what colour is the sky?"
ANSWER = "ANSWER-quince-93b2: blue, mostly"
BANNER = "Codec Server could not connect"
KEY = new_key()


@dataclass
class Setup:
    """A dev server with its UI, an encrypted session on it, and the codec endpoint."""

    ui: str
    session: str
    endpoint: str


@contextmanager
def codec_server(tmp: Path, ui_origin: str) -> Iterator[str]:
    """``keel codec-server --ui ORIGIN`` in its own process; the endpoint URL it prints."""
    port = free_port()
    env = keel_env(
        KEEL_ENCRYPTION_KEY=KEY, KEEL_HOME=str(tmp / "home"), XDG_STATE_HOME=str(tmp / "state")
    )
    command = ["codec-server", "--port", str(port), "--ui", ui_origin]
    proc = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", *command],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        printed = []
        for line in proc.stdout:
            printed.append(line)
            found = re.fullmatch(rf"\s+(http://127\.0\.0\.1:{port}/[A-Za-z0-9_-]{{43}})\s*", line)
            if found:
                break
        else:
            raise AssertionError(f"no endpoint printed: {''.join(printed)}{proc.stderr.read()}")
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no codec server"
                time.sleep(0.1)
        yield found.group(1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err


async def run_encrypted_session(
    address: str, tmp: Path, store_dir: Path | None = None, queue: str | None = None
) -> str:
    """A session with PROMPT and ANSWER; its id. A worker with the key runs it, unless
    ``queue`` names the queue of one already running (``keel dev``'s) on ``store_dir``."""
    keyring = keyring_of(KEY)
    client = await Client.connect(address, data_converter=data_converter(keyring))
    store = open_store(str(store_dir or tmp / "store"), keyring)
    session = f"webui-{uuid.uuid4().hex[:8]}"
    model = write_script(tmp / "script.json", [respond(text(ANSWER))])
    config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
    async with contextlib.AsyncExitStack() as stack:
        if queue is None:
            queue = f"keel-webui-{uuid.uuid4().hex[:8]}"
            await stack.enter_async_context(
                build_worker(client, queue, [SAMPLE_TOOLS], store=store)
            )
        done = await KeelClient(client, queue, store).run(
            session, PROMPT, config=config, timeout_s=60
        )
    assert done.status == "completed", done
    # what the UI gets from Temporal is ciphertext: only the codec server can show it
    history = await client.get_workflow_handle(session).fetch_history()
    for secret in (PROMPT, ANSWER):
        assert secret.encode() not in history_payload_data(history)
    return session


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("KEEL_SHOTS_DIR")
    path = Path(where) if where else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with chromium() as browser:
        browser.set_window_size(1400, 1100)  # a desktop's: the UI's tables are wide
        yield browser


@pytest.fixture(scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory, driver: Any) -> AsyncIterator[Setup]:
    """A dev server as ``keel dev`` runs it (UI on), its session, and ``keel codec-server``."""
    tmp = tmp_path_factory.mktemp("webui")
    async with DevServer(tmp / "dev", in_memory=True, state_home=tmp / "state") as server:
        assert server.ui_url is not None
        session = await run_encrypted_session(server.address, tmp)
        with codec_server(tmp, server.ui_url) as endpoint:
            yield Setup(server.ui_url, session, endpoint)


async def open_history(page: Page, session: str) -> str:
    """The session's page with the model call's event open; the page's text once loaded."""
    await page.open(f"/namespaces/default/workflows/{session}")
    await page.wait_text("body", "Event History")

    def history_tab(driver: Any) -> bool:
        tab = driver.find_element("xpath", "//*[normalize-space(text())='Event History']")
        driver.execute_script("arguments[0].click()", tab)
        return True

    await page.wait(history_tab, "the Event History tab")
    await page.wait_text("body", "Activity Task Completed")

    def expand(driver: Any) -> bool:
        row = driver.find_element("xpath", "//*[normalize-space(text())='Activity Task Completed']")
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'start'}); arguments[0].click()", row
        )
        return True

    await page.wait(expand, "the model call's event opened")
    await page.wait_text("body", "Activity Task Scheduled")  # the opened event's details
    return str(await page.script("return document.body.innerText"))


async def set_browser_endpoint(page: Page, endpoint: str) -> None:
    """What an operator does: the UI's Codec Server dialog, "use my browser setting", Apply."""
    await page.click("[data-testid=data-encoder-status]")
    await page.click("#use-local-endpoint-radio")

    await page.fill("#data-encoder-endpoint-input", endpoint)
    await page.click("[data-testid=confirm-modal-button]")


async def hover_codec_status(page: Page) -> str:
    """The pointer on the UI's codec status (top right), whose tooltip says how decoding
    went; its ``data-testid`` (``data-encoder-status-success``, ``-error``, ...)."""

    def hover(driver: Any) -> str:
        from selenium.webdriver.common.action_chains import ActionChains

        status = driver.find_element("css selector", "[data-testid^=data-encoder-status]")
        ActionChains(driver).move_to_element(status).perform()
        return str(status.get_attribute("data-testid"))

    testid = await page.wait(hover, "the pointer on the codec status")
    await page.call(time.sleep, 0.5)  # the tooltip fades in
    return testid


async def assert_decoded(page: Page, session: str) -> None:
    def decoded(driver: Any) -> bool:
        body = driver.find_element("css selector", "body").text
        return PROMPT in body and ANSWER in body

    await open_history(page, session)
    await page.wait(decoded, "the prompt and the answer in the clear", timeout_s=30)
    body = str(await page.script("return document.body.innerText"))
    assert BANNER not in body
    assert not await page.script(
        "return document.querySelectorAll('[data-testid=data-encoder-status-error]').length"
    )
    await page.text("[data-testid=data-encoder-status-success]")  # the UI says it decoded


async def test_the_ui_decodes_with_the_endpoint_set_in_its_codec_server_dialog(
    setup: Setup, driver: Any, shots: Path
) -> None:
    page = Page(driver, setup.ui)
    await page.open("/namespaces/default/workflows")
    await page.script("localStorage.clear()")
    # without a codec endpoint the page shows ciphertext: what the check below looks for is
    # not on the page by accident
    body = await open_history(page, setup.session)
    assert PROMPT not in body and ANSWER not in body
    await set_browser_endpoint(page, setup.endpoint)
    stored = await page.script("return localStorage.getItem('endpoint')")
    assert json.loads(stored) == setup.endpoint
    await assert_decoded(page, setup.session)
    await page.screenshot(str(shots / "ui-decoded-browser-setting.png"))
    assert await hover_codec_status(page) == "data-encoder-status-success"
    await page.screenshot(str(shots / "ui-decoded-browser-setting-status.png"))


async def test_the_endpoint_without_its_secret_gets_the_banner(
    setup: Setup, driver: Any, shots: Path
) -> None:
    # the bare server, as docs/security.md said before: the UI sends no Authorization
    # header, so every /decode is refused and the UI says so
    page = Page(driver, setup.ui)
    await page.open("/namespaces/default/workflows")
    bare = setup.endpoint.rsplit("/", 1)[0]
    await page.script(f"localStorage.setItem('endpoint', {json.dumps(json.dumps(bare))})")
    await page.script("localStorage.setItem('overrideRemoteCodecConfiguration', 'true')")
    await open_history(page, setup.session)
    await page.wait_text("body", BANNER)
    body = str(await page.script("return document.body.innerText"))
    assert PROMPT not in body and ANSWER not in body
    assert await hover_codec_status(page) == "data-encoder-status-error"
    await page.screenshot(str(shots / "ui-without-secret-banner.png"))


async def test_a_page_of_another_origin_cannot_call_the_endpoint(setup: Setup, driver: Any) -> None:
    # the codec server was told the UI is http://127.0.0.1:PORT; the same UI loaded as
    # http://localhost:PORT is another origin, and its scripts cannot use the endpoint even
    # when they know it: the preflight is refused, and so would the request itself be
    other = setup.ui.replace("127.0.0.1", "localhost")
    page = Page(driver, other)
    await page.open("/namespaces/default/workflows")
    outcome = await page.call(
        driver.execute_async_script,
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0] + '/decode', {
            method: 'POST',
            headers: {'Content-Type': 'application/json', 'X-Namespace': 'default'},
            body: '{"payloads": []}',
        }).then(r => r.text().then(t => done('answered ' + r.status + ' ' + t)),
                e => done('refused: ' + e));
        """,
        setup.endpoint,
    )
    assert outcome.startswith("refused: TypeError"), outcome


async def test_the_dev_servers_flag_makes_every_browser_decode(
    tmp_path: Path, driver: Any, shots: Path
) -> None:
    # temporal server start-dev --ui-codec-endpoint URL: a browser that set nothing decodes
    server = DevServer(tmp_path / "dev", in_memory=True, state_home=tmp_path / "state")
    assert server.ui_url is not None
    with codec_server(tmp_path, server.ui_url) as endpoint:
        server.ui_codec_endpoint = endpoint
        async with server:
            session = await run_encrypted_session(server.address, tmp_path)
            page = Page(driver, server.ui_url)
            await page.open("/namespaces/default/workflows")
            await page.script("localStorage.clear()")
            await assert_decoded(page, session)
            await page.screenshot(str(shots / "ui-decoded-dev-server-flag.png"))
    # the server's log names the flag, never the secret in it
    log = (tmp_path / "dev" / "temporal.log").read_text()
    assert "--ui-codec-endpoint <codec endpoint>" in log
    assert endpoint.rsplit("/", 1)[1] not in log


async def test_keel_dev_ui_codec_makes_its_web_ui_decode(
    tmp_path: Path, driver: Any, shots: Path
) -> None:
    # keel dev --ui-codec: its own codec server, given to the UI; no other step
    home = tmp_path / "home"
    env = keel_env(
        KEEL_ENCRYPTION_KEY=KEY, KEEL_HOME=str(home), XDG_STATE_HOME=str(tmp_path / "state")
    )
    port, page_port, web_ui = free_port(), free_port(), free_port()
    ports = ("--port", str(port), "--ui-port", str(page_port), "--temporal-ui-port", str(web_ui))
    dev = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "dev", "--tools", SAMPLE_TOOLS, "--ui-codec"]
        + list(ports),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert dev.stdout is not None
        ready = ""
        while "Ctrl-C stops" not in ready:
            ready = dev.stdout.readline()
            assert ready, f"keel dev ended: {dev.wait(timeout=30)}, {dev.communicate()}"
        assert f"web UI at http://127.0.0.1:{web_ui} (decoding through a codec server)" in ready
        session = await run_encrypted_session(
            f"127.0.0.1:{port}", tmp_path, store_dir=home / "store", queue="keel"
        )
        page = Page(driver, f"http://127.0.0.1:{web_ui}")
        await page.open("/namespaces/default/workflows")
        await page.script("localStorage.clear()")
        await assert_decoded(page, session)
        await page.screenshot(str(shots / "ui-decoded-keel-dev.png"))
    finally:
        dev.send_signal(signal.SIGINT)
        _, err = dev.communicate(timeout=60)
    assert dev.returncode == 0, err
    assert "Traceback" not in err, err


def test_keel_dev_ui_codec_without_a_key_exits_2(tmp_path: Path) -> None:
    env = keel_env(KEEL_HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"))
    done = keel("dev", "--ui-codec", "--port", str(free_port()), env=env, timeout=60)
    assert done.returncode == 2, done
    assert "KEEL_ENCRYPTION_KEY" in done.stderr
    assert not (tmp_path / "home" / "temporal.db").exists()  # no server was started
