"""Types of the fixtures in ``tests/conftest.py``, for test signatures."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from temporalio.worker import Worker

from keel import SessionConfig

# ``async with run_worker(**worker_options): ...``
RunWorker = Callable[..., AbstractAsyncContextManager[Worker]]
# ``script(responses, **session_config) -> SessionConfig``
Script = Callable[..., SessionConfig]
