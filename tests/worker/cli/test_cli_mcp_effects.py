"""``KEEL_MCP_<NAME>_EFFECTS`` for ``--mcp``: a worker's classes for an MCP server's tools."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers.cli import ROOT, keel

TIME = "time=mcp-server-time --local-timezone UTC"


@pytest.fixture(autouse=True)
def _time_server_installed() -> None:
    if shutil.which("mcp-server-time") is None:
        pytest.skip("mcp-server-time is not installed (pip install -e '.[dev]')")


def test_a_bad_class_exits_2_naming_the_variable_the_server_and_the_tool(
    server_env: dict[str, str],
) -> None:
    env = {**server_env, "KEEL_MCP_TIME_EFFECTS": '{"get_current_time": "rw"}'}
    done = keel("worker", "--mcp", TIME, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "KEEL_MCP_TIME_EFFECTS: MCP server 'time'" in line
    assert "tool 'get_current_time': effect 'rw' is not one of read, idempotent, write" in line


def test_a_tool_the_server_does_not_offer_stops_the_worker(server_env: dict[str, str]) -> None:
    env = {**server_env, "KEEL_MCP_TIME_EFFECTS": '{"get_current_tme": "read"}'}
    done = keel("worker", "--mcp", TIME, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "effects names tools it does not offer: ['get_current_tme']" in done.stderr


def test_the_worker_offers_the_tools_with_the_classes_it_was_given(
    server_env: dict[str, str],
) -> None:
    env = {**server_env, "KEEL_MCP_TIME_EFFECTS": '{"convert_time": "write"}'}
    proc = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "-v", "worker", "--mcp", TIME],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    said = ""
    deadline = time.monotonic() + 60
    try:
        while "offers 2 tools" not in said and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            said += line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "['get_current_time (read)', 'convert_time (write)']" in said, said
