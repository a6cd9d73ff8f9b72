"""Fixtures of the web page's tests: one worker and one app per module, one browser per run."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from keel import ConversationStore, KeelClient, Settings, open_store
from keel.worker.process.assembly import build_worker
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource
from tests.helpers.browser import Page, chromium
from tests.helpers.scripts import SAMPLE_TOOLS


@pytest.fixture(scope="module")
def ui_queue() -> str:
    return f"keel-ui-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ui_store(tmp_path_factory: pytest.TempPathFactory) -> ConversationStore:
    return open_store(str(tmp_path_factory.mktemp("ui-store")), None)


@pytest.fixture(scope="module")
def ui_keel(
    temporal_env: WorkflowEnvironment, ui_queue: str, ui_store: ConversationStore
) -> KeelClient:
    return KeelClient(temporal_env.client, ui_queue, ui_store, query_timeout_s=10)


@pytest.fixture(scope="module")
def ui_model_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's request log: its one worker's settings name it (KEEL_SCRIPTED_LOG)."""
    return tmp_path_factory.mktemp("ui-log") / "model-requests.jsonl"


@pytest.fixture
def model_log(ui_model_log: Path) -> Callable[[], list[dict[str, Any]]]:
    """The requests the module's worker sent its models (every test's, in order)."""

    def _read() -> list[dict[str, Any]]:
        if not ui_model_log.exists():
            return []
        return [json.loads(line) for line in ui_model_log.read_text().splitlines()]

    return _read


@pytest.fixture(scope="module")
async def ui_worker(
    temporal_env: WorkflowEnvironment,
    ui_queue: str,
    ui_store: ConversationStore,
    ui_model_log: Path,
) -> AsyncIterator[None]:
    settings = Settings.from_env({**os.environ, "KEEL_SCRIPTED_LOG": str(ui_model_log)})
    async with build_worker(
        temporal_env.client, ui_queue, [SAMPLE_TOOLS], store=ui_store, settings=settings
    ):
        yield


@pytest.fixture(scope="module")
async def ui_url(ui_keel: KeelClient, ui_worker: None) -> AsyncIterator[str]:
    """The page without a token (loopback only), on a free port."""
    async with ui_running(create_app(KeelSource(ui_keel)), "127.0.0.1", 0) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser: Any, ui_url: str) -> Page:
    return Page(browser, ui_url)


@pytest.fixture
def screenshot_path(tmp_path: Path) -> Path:
    """docs/images/ui-session.png with KEEL_UPDATE_SCREENSHOT=1, else a file under tmp."""
    if os.environ.get("KEEL_UPDATE_SCREENSHOT") == "1":
        return Path(__file__).resolve().parents[2] / "docs" / "images" / "ui-session.png"
    return tmp_path / "ui-session.png"
