"""Issue 32's "done when": a newcomer's own folder, own tools, no PYTHONPATH, no TEMPORAL_ADDRESS.

A folder outside the repository with ``mytools.py`` and a scripted model file; the ``keel``
command a user has on PATH (the installed script, not ``python -m``, so the folder is not on
the path by accident), run there: ``keel run --tools mytools``; ``keel show`` once the module
is gone; ``keel --version``; ``keel dev --port P`` found by the next ``keel run`` there (the
session is on that server); and a ``keel run`` against an OpenAI-compatible server that is
not there, which ends with one line and no traceback.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import keel as keel_package
from keel.worker.cli.main import _log_format
from keel.worker.server.dev_record import record_path
from keel.worker.server.devserver import find_temporal_cli, free_ports
from keel.worker.server.tool_files import tool_files_path
from keel.worker.settings import Settings
from tests.helpers.cli import ROOT

MYTOOLS = '''
from keel import tool


@tool
def shout(text: str) -> str:
    """Say it louder.

    Args:
        text: what to say.
    """
    return text.upper() + "!"
'''


def script(word: str) -> dict[str, list[dict[str, object]]]:
    """A scripted model: shout WORD with the tool, then say what it heard."""
    use = {"toolUseId": f"t-{word}", "name": "shout", "input": {"text": word}}
    return {
        "responses": [
            {
                "content": [{"toolUse": use}],
                "stopReason": "tool_use",
            },
            {"content": [{"text": f"It said {word.upper()}!"}], "stopReason": "end_turn"},
        ]
    }


def keel_script() -> str:
    """The installed ``keel`` command, as on a user's PATH."""
    found = Path(sysconfig.get_path("scripts")) / "keel"
    assert found.is_file(), f"no keel script at {found}: pip install -e . installs it"
    return str(found)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The newcomer's folder: outside the repository, their tools and a scripted model."""
    project = tmp_path / "project"
    project.mkdir()
    assert ROOT not in project.parents
    (project / "mytools.py").write_text(MYTOOLS)
    (project / "model.json").write_text(json.dumps(script("hello")))
    (project / "again.json").write_text(json.dumps(script("again")))
    return project


@pytest.fixture
def env() -> dict[str, str]:
    """A user's shell: no Keel or Temporal settings, no PYTHONPATH, ``keel`` on PATH."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "KEEL_", "OPENAI_")) and k != "PYTHONPATH"
    }
    kept["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), kept.get("PATH", "")])
    kept["NO_PROXY"] = "127.0.0.1,localhost"
    return kept


def run(
    folder: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [keel_script(), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def keel_dev(folder: Path, env: dict[str, str]) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """``keel dev --port P --tools mytools`` running in the folder; Ctrl-C after."""
    port, ui_port, temporal_ui_port = free_ports(3)
    dev = subprocess.Popen(
        [keel_script(), "dev", "--port", str(port), "--ui-port", str(ui_port)]
        + ["--temporal-ui-port", str(temporal_ui_port), "--tools", "mytools"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert dev.stdout is not None
        deadline, said = time.monotonic() + 90, ""
        while "Ctrl-C stops" not in said:  # what a person waits for before the next command
            assert dev.poll() is None, dev.communicate()
            assert time.monotonic() < deadline, f"keel dev did not start: {said}"
            if select.select([dev.stdout], [], [], 0.2)[0]:
                said += dev.stdout.readline()
        state = Settings.from_env(env).state_home
        assert record_path(folder / ".keel", state).exists()  # in the user's state directory
        assert not (folder / ".keel" / "server.json").exists()  # not in the folder
        yield port, dev
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
            dev.communicate(timeout=60)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_own_tools_from_the_folder_then_show_without_them_and_the_version(
    folder: Path, env: dict[str, str]
) -> None:
    # their own tool module, next to them, found with no PYTHONPATH
    first = run(
        folder, env, "run", "--model", "scripted:model.json", "--tools", "mytools", "shout hello"
    )
    assert first.returncode == 0, first.stderr
    assert "It said HELLO!" in first.stdout
    assert (folder / ".keel" / "temporal.db").exists()  # KEEL_HOME is the folder's .keel
    assert f"keeping the sessions in {folder / '.keel'} (new)" in first.stderr
    session = first.stderr.split("session ", 1)[1].split(";", 1)[0]
    assert session.startswith("session-"), first.stderr

    # reading a session imports no tool: the module may be gone
    (folder / "mytools.py").unlink()
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    shown = run(folder, env, "show", session)
    assert shown.returncode == 0, shown.stderr
    assert "HELLO!" in shown.stdout and "It said HELLO!" in shown.stdout

    # a module that is not there names the folder searched
    missing = run(folder, env, "run", "--model", "scripted:model.json", "--tools", "mytools", "x")
    assert missing.returncode == 2
    assert f"tool module 'mytools' not found: no mytools.py or mytools/__init__.py in {folder}" in (
        missing.stderr
    )
    assert "Traceback" not in missing.stderr

    version = run(folder, env, "--version")
    assert version.returncode == 0 and keel_package.__version__ in version.stdout


def test_a_tool_file_in_another_folder_is_found_again_by_the_next_turn(
    folder: Path, env: dict[str, str]
) -> None:
    (folder / "lib").mkdir()
    (folder / "mytools.py").rename(folder / "lib" / "loudtools.py")
    both = script("hello")
    both["responses"] += script("again")["responses"]
    (folder / "two.json").write_text(json.dumps(both))
    first = run(
        folder, env, "run", "--session", "lib-tools", "--model", "scripted:two.json",
        "--tools", "lib/loudtools.py", "shout hello",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "It said HELLO!" in first.stdout
    # the session records the module's name; the embedded worker remembered the file
    state = Settings.from_env(env).state_home
    remembered = json.loads(tool_files_path(folder / ".keel", state).read_text())["modules"]
    assert remembered == {"loudtools": str(folder / "lib" / "loudtools.py")}
    assert not (folder / ".keel" / "tool_files.json").exists()
    second = run(folder, env, "run", "--session", "lib-tools", "shout again")
    assert second.returncode == 0, second.stderr
    assert "It said AGAIN!" in second.stdout


def test_keel_dev_in_the_folder_is_found_by_the_next_keel_run(
    folder: Path, env: dict[str, str], keel_dev: tuple[int, subprocess.Popen[str]]
) -> None:
    port, _ = keel_dev
    done = run(
        folder, env, "run", "--session", "on-dev", "--model", "scripted:again.json", "--tools",
        "./mytools.py", "shout again",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "It said AGAIN!" in done.stdout
    assert "no Temporal known here" not in done.stderr  # it did not start a server of its own
    cli = find_temporal_cli()
    assert cli is not None
    listed = subprocess.run(
        [cli, "workflow", "list", "--address", f"127.0.0.1:{port}", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "on-dev" in {w["execution"]["workflowId"] for w in json.loads(listed.stdout)}


def test_a_model_server_that_is_not_there_ends_the_turn_in_one_line(
    folder: Path, env: dict[str, str]
) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    started = time.monotonic()
    done = run(
        folder,
        {**env, "OPENAI_BASE_URL": base},
        "run", "--session", "nothing-there", "--model", "openai:x", "--model-retry", "3", "hi",
    )  # fmt: skip
    took = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    failed = [line for line in done.stderr.splitlines() if "turn 1 of session" in line]
    assert len(failed) == 1, done.stderr
    assert failed[0].startswith("turn 1 of session nothing-there failed: model server ")
    assert f"{base} (model 'x') unreachable (connection refused); gave up after " in failed[0]
    assert failed[0].endswith("(model_retry_s: 3 s)")
    retries = [line for line in done.stderr.splitlines() if "; retrying in " in line]
    assert 2 <= len(retries) <= 5, done.stderr  # one line per retry at most
    assert took < 60, took


def test_the_cli_log_shows_an_exception_in_one_line_and_its_traceback_with_v() -> None:
    try:
        raise asyncio_cancelled()
    except BaseException:  # noqa: BLE001 - the record carries it, as the SDK's does
        record = logging.LogRecord(
            "temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed",
            None, sys.exc_info(),
        )  # fmt: skip
    quiet = _log_format(tracebacks=False).format(record)
    assert quiet == (
        "WARNING temporalio.activity: Completing activity as failed: CancelledError: "
        "Activity cancelled"
    )
    loud = _log_format(tracebacks=True).format(record)
    assert loud.startswith("WARNING temporalio.activity: Completing activity as failed\n")
    assert "Traceback (most recent call last)" in loud


def asyncio_cancelled() -> BaseException:
    import asyncio

    return asyncio.CancelledError("Activity cancelled")
