"""Shared fixtures: one real Temporal dev server per test session, a fresh task queue per test.

Fixtures only; what tests import by name is in ``tests/helpers``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keel import ConversationStore, KeelClient, SessionConfig, open_store
from keel.activities.store import Keyring
from keel.worker.payloads import data_converter
from keel.worker.process.assembly import build_worker
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scheduling import longest_first
from tests.helpers.scripts import JUDGES, SAMPLE_TOOLS, write_script
from tests.helpers.temporal import dev_server


def pytest_configure(config: pytest.Config) -> None:
    """Give the processes tests start a terminal's Ctrl-C and Ctrl-\\, however pytest started.

    A shell without job control starts a background command (``pytest ... &``) with SIGINT
    and SIGQUIT ignored, and every process it starts inherits that: the tests that press
    Ctrl-C or Ctrl-\\ at a ``keel`` process would then see it go on.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    _private_state_home()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest test files first, for xdist to hand out (``tests/helpers/scheduling.py``)."""
    longest_first(items)


def _private_state_home() -> None:
    """Keep what the tests' workers and ``keel dev`` write for the user out of the user's home.

    Workers journal their running attempts, and ``keel dev`` records its server, under
    ``$XDG_STATE_HOME/keel`` (default ``~/.local/state``): every test run left its dead
    workers' journals there, for every later worker on the machine to look through. Each
    test process gets a state directory of its own, removed when it exits; a test that sets
    ``XDG_STATE_HOME`` itself still does.
    """
    if "XDG_STATE_HOME" in os.environ:
        return
    home = tempfile.mkdtemp(prefix="keel-test-state-")
    os.environ["XDG_STATE_HOME"] = home
    atexit.register(shutil.rmtree, home, True)


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    async with dev_server() as env:
        yield env


@pytest.fixture
def keyring() -> Keyring | None:
    """The encryption keys of this test's clients, workers and store: none by default.

    A test module that defines its own ``keyring`` fixture (``tests.helpers.encryption``)
    runs with encryption on: every payload and stored object encrypted.
    """
    return None


@pytest.fixture
def client(temporal_env: WorkflowEnvironment, keyring: Keyring | None) -> Client:
    if keyring is None:
        return temporal_env.client
    base = temporal_env.client
    return Client(
        base.service_client, namespace=base.namespace, data_converter=data_converter(keyring)
    )


@pytest.fixture
def task_queue() -> str:
    return f"keel-test-{uuid.uuid4()}"


@pytest.fixture
def store(tmp_path: Path, keyring: Keyring | None) -> ConversationStore:
    """This test's conversation store, shared by its workers and its KeelClient."""
    return open_store(str(tmp_path / "store"), keyring)


@pytest.fixture
def keel(client: Client, task_queue: str, store: ConversationStore) -> KeelClient:
    return KeelClient(client, task_queue, store)


@pytest.fixture
def run_worker(client: Client, task_queue: str, store: ConversationStore) -> RunWorker:
    """``async with run_worker(): ...`` runs a Keel worker on this test's task queue."""

    @asynccontextmanager
    async def _run(**options: Any) -> AsyncIterator[Worker]:
        options.setdefault("max_cached_workflows", 0)  # every task replays: proves determinism
        modules = [SAMPLE_TOOLS, JUDGES]  # the test judges run only on a worker given them
        worker = build_worker(client, task_queue, modules, store=store, **options)
        async with worker:
            yield worker

    return _run


@pytest.fixture
def script(tmp_path: Path) -> Script:
    """Write a scripted model file and return a session config that uses it."""

    def _write(responses: list[dict[str, Any]], **config: Any) -> SessionConfig:
        model = write_script(tmp_path / f"script-{uuid.uuid4().hex[:8]}.json", responses)
        config.setdefault("tool_modules", [SAMPLE_TOOLS])
        return SessionConfig(model=model, **config)

    return _write


@pytest.fixture
def model_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], list[dict[str, Any]]]:
    """Point KEEL_SCRIPTED_LOG at a file; the returned callable reads the requests logged."""
    path = tmp_path / "model-requests.jsonl"
    monkeypatch.setenv("KEEL_SCRIPTED_LOG", str(path))

    def _read() -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    return _read
