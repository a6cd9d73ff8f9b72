"""Driving the ``keel`` CLI as a user does: in separate processes, with a user's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def keel_env(**extra: str) -> dict[str, str]:
    """This process's environment without Keel's and Temporal's settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def keel(
    *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``keel ARGS`` to completion; its exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "keel.worker.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def worker_process(
    env: dict[str, str], tools: str, *, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """``keel worker --tools TOOLS`` started in its own process (stderr piped, as text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", tools],
        env=env,
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def keel_worker(env: dict[str, str], tools: str) -> Iterator[subprocess.Popen[str]]:
    """``keel worker --tools TOOLS`` in its own process for the block; SIGTERM after it."""
    proc = worker_process(env, tools, stdout=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
