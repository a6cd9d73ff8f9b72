"""Two terminals on one folder, as a newcomer works: no TEMPORAL_ADDRESS, real processes.

While an embedded ``keel run`` waits for a person, the reading and deciding commands of a
second terminal reach its server; ``keel dev --no-worker`` serves Temporal only, and a
``keel worker`` started in the same folder finds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from keel.worker.server.dev_record import record_path
from keel.worker.server.devserver import DEFAULT_ADDRESS, address_reachable
from keel.worker.server.records import records_dir, write_private
from tests.helpers.cli import keel, keel_env, keel_popen
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port

QUESTION = "approve? [y/N] "
WORKSPACE = "keel.activities.examples.workspace"


def default_address_taken() -> bool:
    return asyncio.run(address_reachable(DEFAULT_ADDRESS))


# keel run embeds its server only when nothing listens on the default address
needs_free_default = pytest.mark.skipif(
    default_address_taken(), reason=f"something listens on {DEFAULT_ADDRESS}"
)


class Terminal:
    """``keel ARGS`` in ``cwd`` with a pseudo-terminal for stdin and stdout (stderr a pipe)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", *args],
            env=env,
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
        os.close(slave)
        self.output = ""

    def read_until(self, marker: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in {self.output!r}"
            assert self.proc.poll() is None or self._read_ready(0.1), self.output
            self._read_ready(min(left, 0.5))
        return self.output

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """The exit code, and stderr."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read_ready(0.1)
        code = self.proc.wait(timeout=5)
        while self._read_ready(0):
            pass
        os.close(self.master)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read().decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _read_ready(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: the process closed the terminal
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)


def newcomer(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """A folder without Keel, the environment (own state directory), and that directory."""
    folder = tmp_path / "project"
    folder.mkdir()
    state = str(tmp_path / "state")
    return folder, keel_env(XDG_STATE_HOME=state), state


def guests(folder: Path, state: str) -> list[Path]:
    return sorted(records_dir(folder / ".keel", state).glob("guest-*.json"))


@needs_free_default
def test_a_second_terminal_reads_and_approves_while_an_embedded_run_waits(
    tmp_path: Path,
) -> None:
    folder, env, state = newcomer(tmp_path)
    target = tmp_path / "approved.txt"
    model = write_script(
        tmp_path / "s.json",
        [
            respond(
                text("I need approval"),
                tool_use("g1", "guarded_record", path=str(target), value="approved"),
                stop="tool_use",
            ),
            respond(text("finished")),
        ],
    )
    # an earlier session of the folder, with tools the next keel run does not load
    earlier = write_script(tmp_path / "e.json", [respond(text("earlier"))])
    done = keel(
        "run", "--session", "earlier", "--model", earlier, "--tools", WORKSPACE, "hi",
        env=env, cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = ["run", "--session", "both", "--model", model, "--tools", SAMPLE_TOOLS, "go"]
    first = Terminal(run, env, folder)
    try:
        first.read_until(QUESTION)
        home = folder / ".keel"
        record = json.loads(record_path(home, state).read_text())
        assert record["shared"] is False and record["owner_pid"] == first.proc.pid

        pending = keel("pending", "both", "--json", env=env, cwd=folder)
        assert pending.returncode == 0, pending.stderr
        [interrupt] = json.loads(pending.stdout)["interrupts"]
        assert interrupt["tool_use"]["name"] == "guarded_record", interrupt
        said = keel("pending", "both", env=env, cwd=folder)
        assert said.returncode == 0 and f"keel approve both {interrupt['id']}" in said.stdout, said
        shown = keel("show", "both", env=env, cwd=folder)
        assert shown.returncode == 0 and "[turn 1 awaiting_human" in shown.stdout, shown.stderr
        listed = keel("sessions", "--json", env=env, cwd=folder)
        assert listed.returncode == 0, listed.stderr
        assert [s["session"] for s in json.loads(listed.stdout)] == ["both", "earlier"]
        for done in (pending, said, shown, listed):
            assert "in use by keel process" not in done.stderr
        assert guests(folder, state) == []  # each guest removed its record

        # acting on a session whose tools the first terminal's worker does not run: refused
        steered = keel("steer", "earlier", "and more", env=env, cwd=folder)
        assert steered.returncode == 1, steered.stderr
        assert f"in use by keel process {first.proc.pid}, which runs a worker without " in (
            steered.stderr
        )
        assert WORKSPACE in steered.stderr and "for session 'earlier'" in steered.stderr
        shown = keel("show", "earlier", env=env, cwd=folder)  # reading it is fine
        assert shown.returncode == 0 and "assistant: earlier" in shown.stdout, shown.stderr

        # a command that would start its own server still finds the folder held
        other = keel("run", "--session", "other", "--model", model, "x", env=env, cwd=folder)
        assert other.returncode == 1, other.stderr
        assert f"in use by keel process {first.proc.pid}" in other.stderr, other.stderr

        # a follower that would never end by itself: it ends with the first terminal
        watch = keel_popen(
            "watch",
            "both",
            env=env,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        approved = keel("approve", "both", interrupt["id"], env=env, cwd=folder)
        approved_at = time.monotonic()
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith("finished\n"), approved.stdout

        code, err = first.finish()
        assert code == 0, (first.output, err)
        after = first.output.split(QUESTION)[-1]
        assert f"{interrupt['id']} was decided in another terminal" in after, after
        assert "finished" in after, after
        assert target.read_text() == "approved\n"  # the first terminal's worker ran the tool
        # keel watch does not hold the server: the first terminal did not wait for it
        assert time.monotonic() - approved_at < 8, err

        watched, unwatched = watch.communicate(timeout=60)
        assert watch.returncode == 1, (watched, unwatched)
        assert f"keel process {first.proc.pid}, whose embedded Temporal" in unwatched, unwatched
        assert "Traceback" not in unwatched
    finally:
        first.kill()
    assert not record_path(folder / ".keel", state).exists()
    assert guests(folder, state) == []
    # the folder is free again: the next command embeds its own server
    shown = keel("show", "both", env=env, cwd=folder)
    assert shown.returncode == 0 and "assistant: finished" in shown.stdout, shown.stderr


def test_a_record_that_is_not_an_embedded_run_of_this_folder_is_not_followed(
    tmp_path: Path,
) -> None:
    """A forged record of an embedded server (pid 1 is no keel run) and a stale one."""
    import socket

    folder, env, state = newcomer(tmp_path)
    home = folder / ".keel"
    home.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        forged = {"address": f"127.0.0.1:{port}", "server_pid": 1, "owner_pid": 1, "shared": False}
        write_private(record_path(home, state), home, forged)
        done = keel("pending", "s", env=env, cwd=folder)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected to the forged address
    finally:
        listener.close()
    said = [line for line in done.stderr.splitlines() if "ignoring the server record" in line]
    assert len(said) == 1 and "was not started by process 1" in said[0], done.stderr
    assert done.returncode == 2 and "no Temporal server found" in done.stderr, done.stderr
    assert guests(folder, state) == []

    # stale: processes that have ended, quietly ignored as before
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = {**forged, "server_pid": gone.pid, "owner_pid": gone.pid}
    write_private(record_path(home, state), home, stale)
    done = keel("pending", "s", env=env, cwd=folder)
    assert done.returncode == 2 and "no Temporal server found" in done.stderr, done.stderr
    assert "ignoring" not in done.stderr, done.stderr


@contextmanager
def dev_without_worker(folder: Path, env: dict[str, str]) -> Iterator[list[str]]:
    """``keel dev --no-worker`` in ``folder`` on free ports until ready; Ctrl-C after."""
    ports = ("--port", str(free_port()), "--ui-port", str(free_port()))
    dev = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "dev", "--no-worker", *ports]
        + ["--temporal-ui-port", str(free_port())],
        env=env,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert dev.stdout is not None
    lines: list[str] = []
    try:
        while not any("--no-worker" in line for line in lines):
            line = dev.stdout.readline()
            assert line, f"keel dev ended: {dev.wait(timeout=30)}, {dev.communicate()}"
            lines.append(line)
        yield lines
    finally:
        dev.send_signal(signal.SIGINT)
        _, err = dev.communicate(timeout=60)
        assert dev.returncode == 0, err


def test_keel_dev_without_a_worker_and_keel_worker_in_the_same_folder(tmp_path: Path) -> None:
    folder, env, state = newcomer(tmp_path)
    model = write_script(
        tmp_path / "s.json",
        [
            respond(tool_use("a1", "add", a=2, b=3), stop="tool_use"),
            respond(text("it is 5")),
            respond(text("still 5")),
        ],
    )
    refused = keel("dev", "--no-worker", "--tools", SAMPLE_TOOLS, env=env, cwd=folder)
    assert refused.returncode == 2 and "--no-worker runs none" in refused.stderr, refused.stderr

    with dev_without_worker(folder, env) as said:
        assert "no worker runs here (--no-worker)" in said[-1], said
        assert json.loads(record_path(folder / ".keel", state).read_text())["shared"] is True
        # no worker: a turn sent now waits
        detached = keel(
            "run", "--detach", "--session", "sum", "--model", model, "--tools", SAMPLE_TOOLS,
            "add 2 and 3", env=env, cwd=folder,
        )  # fmt: skip
        assert detached.returncode == 0, detached.stderr
        assert "the turn starts once a worker polls it" in detached.stderr, detached.stderr
        worker = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
            env=env,  # no TEMPORAL_ADDRESS: it finds the folder's keel dev
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            waited = keel("wait", "sum", "--timeout", "60", env=env, cwd=folder)
            assert waited.returncode == 0 and waited.stdout == "it is 5\n", waited.stderr
            ran = keel("run", "--session", "sum", "again?", env=env, cwd=folder)
            assert ran.returncode == 0 and ran.stdout == "still 5\n", ran.stderr
        finally:
            worker.send_signal(signal.SIGTERM)
            _, worker_err = worker.communicate(timeout=60)
        assert worker.returncode == 0, worker_err
        assert "Traceback" not in worker_err, worker_err
    assert not record_path(folder / ".keel", state).exists()
