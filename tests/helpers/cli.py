"""Driving the ``keel`` CLI as a user does: in separate processes, with a user's environment."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.cli_prefork import ForkedProcess, PreforkServer

ROOT = Path(__file__).resolve().parents[2]


def keel_env(**extra: str) -> dict[str, str]:
    """This process's environment without Keel's and Temporal's settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


_prefork: PreforkServer | None = None
_prefork_failed: str | None = None
_prefork_lock = threading.Lock()


def _prefork_server() -> PreforkServer | None:
    """This test process's prefork server, started at first use.

    None with KEEL_TEST_PREFORK=0, or when it could not start: commands then run as
    processes of their own, slower but the same (``test_cli_prefork`` fails on that).
    """
    global _prefork, _prefork_failed
    if os.environ.get("KEEL_TEST_PREFORK", "1") == "0" or _prefork_failed is not None:
        return None
    with _prefork_lock:
        if _prefork is None or _prefork.proc.poll() is not None:
            try:
                _prefork = PreforkServer(ROOT, keel_env())
            except RuntimeError as err:
                _prefork_failed = str(err)
                warnings.warn(f"keel commands run unforked: {err}", stacklevel=2)
                return None
            atexit.register(_prefork.close)
        return _prefork


def keel(
    *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``keel ARGS`` to completion; its exit code, stdout and stderr.

    The command runs forked from a process that has imported Keel already
    (``tests.helpers.cli_prefork``): the same ``main()`` in a process of its own, without
    the 2 s of imports. An environment that changes how Python starts gets a new process.
    """
    server = _prefork_server()
    if server is not None and server.serves(env):
        return server.run(list(args), env, cwd, timeout)
    return keel_alone(*args, env=env, cwd=cwd, timeout=timeout)


def keel_alone(
    *args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``keel ARGS`` to completion in a new Python process (which imports everything)."""
    return subprocess.run(
        [sys.executable, "-m", "keel.worker.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def keel_popen(
    *args: str, env: dict[str, str], cwd: Path = ROOT, **streams: Any
) -> subprocess.Popen[str] | ForkedProcess:
    """Start ``keel ARGS`` in its own process, as ``subprocess.Popen(text=True)`` would.

    Forked from the prefork server, as ``keel`` runs commands; ``streams`` are ``stdin``,
    ``stdout`` and ``stderr`` (DEVNULL by default, PIPE, a file or a descriptor).
    """
    server = _prefork_server()
    if server is not None and server.serves(env):
        return server.popen(list(args), env, cwd, **streams)
    for name in ("stdin", "stdout", "stderr"):
        streams.setdefault(name, subprocess.DEVNULL)
    return subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", *args], env=env, cwd=cwd, text=True, **streams
    )


def worker_process(
    env: dict[str, str], tools: str, *, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[str] | ForkedProcess:
    """``keel worker --tools TOOLS`` started in its own process (stderr piped, as text)."""
    return keel_popen("worker", "--tools", tools, env=env, stdout=stdout, stderr=subprocess.PIPE)


@contextmanager
def keel_worker(
    env: dict[str, str], tools: str
) -> Iterator[subprocess.Popen[str] | ForkedProcess]:
    """``keel worker --tools TOOLS`` in its own process for the block; SIGTERM after it."""
    proc = worker_process(env, tools, stdout=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
