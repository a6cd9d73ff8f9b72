"""The CLI tests' prefork runner gives what a process of its own gives.

``tests.helpers.cli.keel`` runs a command forked from a process that imported Keel once
(``tests.helpers.cli_prefork``); these tests run the same commands both ways and compare
everything a test reads: exit code, stdout and stderr.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.helpers.cli import ROOT, _prefork_server, keel, keel_alone, keel_env, keel_popen
from tests.helpers.cli_prefork import ForkedProcess
from tests.worker.conftest import until_polled

COMMANDS = [
    ["--help"],
    ["--version"],
    ["show", "--bogus"],
    ["run", "--model"],
    ["show", "s1"],  # no server: where it looked names the folder and the environment
    ["sessions", "--json"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_forked_command_is_the_command(args: list[str], tmp_path: Path) -> None:
    env = keel_env(KEEL_HOME=str(tmp_path / "home"), TEMPORAL_ADDRESS="")
    env.pop("TEMPORAL_ADDRESS")
    assert _prefork_server() is not None, cli._prefork_failed
    forked = keel(*args, env=env, cwd=tmp_path)
    alone = keel_alone(*args, env=env, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        alone.returncode,
        alone.stdout,
        alone.stderr,
    )
    assert forked.stdout or forked.stderr


def test_the_environment_is_the_commands_not_the_servers(tmp_path: Path) -> None:
    """The server imported Keel under another environment; the command reads its own."""
    homes = [tmp_path / "one", tmp_path / "two"]
    said = [
        keel("show", "s1", env=keel_env(KEEL_HOME=str(home)), cwd=tmp_path).stderr
        for home in homes
    ]
    assert str(homes[0]) in said[0] and str(homes[1]) not in said[0]
    assert str(homes[1]) in said[1] and str(homes[0]) not in said[1]


def test_a_command_past_its_timeout_is_killed(server_env: dict[str, str]) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        keel("worker", "--tools", "tests.sample_tools", env=server_env, cwd=ROOT, timeout=3)
    assert time.monotonic() - started < 15


def test_a_forked_process_streams_and_signals_as_popen(server_env: dict[str, str]) -> None:
    """Started with ``keel_popen``: its pid is the command's, its streams are text, and a
    signal ends it with the exit code and output a process of its own gives."""
    server = _prefork_server()
    assert server is not None
    ended = []
    for forked in (True, False):
        env = {**server_env, "KEEL_TASK_QUEUE": f"prefork-{uuid.uuid4().hex[:8]}"}
        args = ["worker", "--tools", "tests.sample_tools"]
        proc: subprocess.Popen[str] | ForkedProcess
        if forked:
            proc = keel_popen(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert isinstance(proc, ForkedProcess)
        else:
            proc = subprocess.Popen(
                [sys.executable, "-m", "keel.worker.cli", *args],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        until_polled(env, proc)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert cmdline.startswith(sys.executable.encode()), cmdline
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        ended.append((proc.returncode, out, err))
    assert ended[0] == ended[1]
    assert ended[0][0] == 0, ended  # a worker stops cleanly on Ctrl-C
    running = keel_popen("worker", "--tools", "tests.sample_tools", env=server_env)
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=0.5)
    running.kill()
    assert running.wait(timeout=30) == -signal.SIGKILL
