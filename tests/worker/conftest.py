"""Fixtures for driving the ``keel`` CLI as a user does: a server, a worker process."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers.cli import keel_env, keel_worker
from tests.helpers.scripts import SAMPLE_TOOLS


@pytest.fixture
def server_env(temporal_env: WorkflowEnvironment) -> dict[str, str]:
    address = temporal_env.client.service_client.config.target_host
    return keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=f"cli-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def worker_process(server_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    with keel_worker(server_env, SAMPLE_TOOLS) as proc:
        yield proc
