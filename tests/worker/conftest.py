"""Fixtures for driving the ``keel`` CLI as a user does: a server, a worker process."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from keel.worker.server.devserver import find_temporal_cli
from tests.helpers.cli import keel_env, keel_worker
from tests.helpers.scripts import SAMPLE_TOOLS


@pytest.fixture
def server_env(temporal_env: WorkflowEnvironment) -> dict[str, str]:
    address = temporal_env.client.service_client.config.target_host
    return keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=f"cli-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def worker_process(server_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``keel worker`` in its own process, polling the test's task queue once yielded."""
    with keel_worker(server_env, SAMPLE_TOOLS) as proc:
        until_polled(server_env, proc)
        yield proc


def until_polled(env: dict[str, str], proc: subprocess.Popen[str]) -> None:
    """Wait until Temporal has seen a worker poll the task queue of ``env`` for workflows.

    A reading command needs a worker that polled (``check_worker``): one that is still
    starting would make it say that no worker runs.
    """
    describe = [
        find_temporal_cli() or "temporal", "task-queue", "describe", "--task-queue",
        env["KEEL_TASK_QUEUE"], "--address", env["TEMPORAL_ADDRESS"], "--output", "json",
    ]  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        out = subprocess.run(describe, capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and json.loads(out.stdout).get("pollers"):
            return
        assert time.monotonic() < deadline, out.stderr or out.stdout
        time.sleep(0.2)
