"""Embedded mode after a crash: the orphaned server is reaped and the session resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keel.worker.server.dev_record import record_path
from keel.worker.server.devserver import DevServer, DevServerError
from keel.worker.server.records import write_private
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_resume_after_keel_run_is_killed_mid_turn(tmp_path: Path) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "tool-ran.txt"
    model = write_script(
        tmp_path / "s.json",
        [
            respond(
                tool_use("r", "record", path=str(marker), value="before-kill"),
                tool_use("s", "slow", seconds=4.0, label="survived"),
                stop="tool_use",
            ),
            respond(text("turn one done")),
            respond(text("turn two done")),
        ],
    )
    env = keel_env(KEEL_HOME=str(home))
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keel.worker.cli",
            "run",
            "--session",
            "crashy",
            "--model",
            model,
            "--tools",
            SAMPLE_TOOLS,
            "--heartbeat-timeout",
            "600",
            "start",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():  # the turn is now inside its tools
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first turn never reached its tools"
        time.sleep(0.1)
    time.sleep(1.0)  # let the quick record tool report its completion; slow is still running
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    orphan = json.loads(record_path(home).read_text())["server_pid"]
    assert orphan in processes_mentioning(str(home))  # the server outlived its owner

    # the new worker gives the dead one's slow tool back from its journal at once, though
    # its embedded server listens on another port (the same database, so the same cluster
    # id): with a 10-minute heartbeat timeout, nothing else would within the 120 s
    second = keel("run", "--json", "--session", "crashy", "next", env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["message"]["content"] == [{"text": "turn two done"}]
    shown = keel("show", "crashy", "--json", env=env, timeout=120)
    conv = json.loads(shown.stdout)["messages"]
    assert [m["role"] for m in conv] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    results = {b["toolResult"]["toolUseId"]: b["toolResult"] for b in conv[2]["content"]}
    assert results["s"]["status"] == "success" and results["s"]["content"] == [{"text": "survived"}]
    # the record tool had finished before the kill; its result was kept, not re-run
    assert marker.read_text().splitlines() == ["before-kill"]
    assert processes_mentioning(str(home)) == [], "a dev server outlived keel"


@pytest.fixture
def fake_process() -> list[subprocess.Popen[bytes]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_live_owner_keeps_the_data_dir(tmp_path: Path, fake_process: list) -> None:
    owner = subprocess.Popen(["sleep", "30"])
    # a stand-in whose command line looks like `temporal server start-dev` on this folder
    database = str(tmp_path.resolve() / "temporal.db")
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "server", "start-dev"]
        + ["--db-filename", database]
    )
    fake_process += [owner, server]
    record = {"server_pid": server.pid, "owner_pid": owner.pid, "address": "127.0.0.1:1"}
    write_private(record_path(tmp_path), tmp_path, record)
    with pytest.raises(DevServerError, match=f"in use by keel process {owner.pid}"):
        await DevServer(tmp_path, ui=False).start()
    assert server.poll() is None

    owner.kill()
    owner.wait()
    async with DevServer(tmp_path, ui=False) as dev:
        assert server.wait(timeout=15) is not None  # the orphan was stopped
        assert json.loads(dev.lock_path.read_text())["owner_pid"] == os.getpid()
    assert not record_path(tmp_path).exists()
