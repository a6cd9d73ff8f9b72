"""Helpers and fixtures for driving the ``keel`` CLI as a user does: separate processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers.scripts import SAMPLE_TOOLS

ROOT = Path(__file__).resolve().parents[2]


def keel_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def keel(
    *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def server_env(temporal_env: WorkflowEnvironment) -> dict[str, str]:
    address = temporal_env.client.service_client.config.target_host
    return keel_env(TEMPORAL_ADDRESS=address, KEEL_TASK_QUEUE=f"cli-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def worker_process(server_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "worker", "--tools", SAMPLE_TOOLS],
        env=server_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
