"""One way to find the server: ``keel dev``'s address is recorded for its folder, and a
command that finds no Temporal says where it looked instead of creating a database."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from keel.worker.server.dev_record import record_path
from keel.worker.server.devserver import DEFAULT_ADDRESS, address_reachable
from keel.worker.settings import Settings
from tests.helpers.cli import keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script
from tests.helpers.temporal import free_port

NOWHERE = "no Temporal server found"


def default_address_taken() -> bool:
    return asyncio.run(address_reachable(DEFAULT_ADDRESS))


@contextmanager
def keel_dev(folder: Path, env: dict[str, str], *flags: str) -> Iterator[list[str]]:
    """``keel dev FLAGS`` in ``folder`` until it is ready; the lines it printed. Ctrl-C after."""
    dev = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "dev", "--tools", SAMPLE_TOOLS, *flags],
        env=env,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert dev.stdout is not None
    lines: list[str] = []
    try:
        while not any("Ctrl-C stops" in line for line in lines):
            line = dev.stdout.readline()
            assert line, f"keel dev ended: {dev.wait(timeout=30)}, {dev.communicate()}"
            lines.append(line)
        lines.append(dev.stdout.readline())  # where other folders find it
        yield lines
    finally:
        dev.send_signal(signal.SIGINT)
        out, err = dev.communicate(timeout=60)
        assert dev.returncode == 0, err


def test_keel_dev_on_another_port_is_found_by_the_next_command_in_its_folder(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    env = keel_env()  # no TEMPORAL_ADDRESS, no KEEL_HOME: ./.keel
    port, page, web_ui = free_port(), free_port(), free_port()
    model = write_script(tmp_path / "s.json", [respond(text("tidied")), respond(text("again"))])
    flags = ("--port", str(port), "--ui-port", str(page), "--temporal-ui-port", str(web_ui))
    with keel_dev(folder, env, *flags) as said:
        address = f"127.0.0.1:{port}"
        assert f"Temporal at {address}, web UI at http://127.0.0.1:{web_ui}" in said[-2]
        assert f"Keel's approvals page at http://127.0.0.1:{page}" in said[-2]
        home = folder / ".keel"
        assert said[-1].endswith(f"from another folder, set KEEL_HOME={home}\n"), said
        state = Settings.from_env(env).state_home
        record = json.loads(record_path(home, state).read_text())
        assert record["address"] == address and record["shared"] is True
        assert not (home / "server.json").exists()  # nothing a clone could plant

        done = keel("run", "--session", "tidy", "--model", model, "tidy up", env=env, cwd=folder)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "tidied\n" and "note" not in done.stderr
        shown = keel("show", "tidy", env=env, cwd=folder)
        assert shown.returncode == 0, shown.stderr
        assert "assistant: tidied" in shown.stdout
        listed = keel("sessions", "--json", env=env, cwd=folder)
        assert [s["session"] for s in json.loads(listed.stdout)] == ["tidy"], listed.stderr
        # keel dev runs the turns: a detached one needs no worker of the command's own
        detached = keel("run", "--detach", "--session", "tidy", "more", env=env, cwd=folder)
        assert detached.returncode == 0, detached.stderr
        waited = keel("wait", "tidy", env=env, cwd=folder)
        assert waited.returncode == 0 and waited.stdout == "again\n", waited.stderr

        # every port it opens is the one asked for
        for url in (f"http://127.0.0.1:{web_ui}/", f"http://127.0.0.1:{page}/"):
            with urllib.request.urlopen(url, timeout=30) as answer:
                assert answer.status == 200

        # --port picks the port of a Temporal keel run starts; here none is started
        refused = keel(
            "run", "--port", str(free_port()), "--session", "tidy", "x", env=env, cwd=folder
        )
        assert refused.returncode == 2 and f"the Temporal at {address}" in refused.stderr

        # from elsewhere, as keel dev said
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        there = keel("show", "tidy", env=keel_env(KEEL_HOME=str(home)), cwd=elsewhere)
        assert there.returncode == 0 and "assistant: again" in there.stdout, there.stderr
        assert not (elsewhere / ".keel").exists()
    assert not record_path(home, state).exists()


@pytest.mark.skipif(default_address_taken(), reason=f"something listens on {DEFAULT_ADDRESS}")
def test_a_command_where_no_server_is_known_says_where_it_looked(tmp_path: Path) -> None:
    env = keel_env()
    home = tmp_path / ".keel"
    for args in (
        ["show", "tidy2"],
        ["pending", "tidy2"],
        ["watch", "tidy2"],
        ["wait", "tidy2"],
        ["sessions"],
        ["approve", "tidy2", "i-1"],
        ["cancel", "tidy2"],
    ):
        done = keel(*args, env=env, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith(f"keel: {NOWHERE}: TEMPORAL_ADDRESS is not set"), line
        assert (
            f"no `keel dev` serves {home}" in line
            and f"nothing listens on {DEFAULT_ADDRESS}" in line
        )
        assert "set KEEL_HOME" in line and "start `keel dev`" in line, line
        assert not home.exists(), args  # nothing created

    # only keel run creates the folder's sessions database, and says so, the first time
    model = write_script(tmp_path / "s.json", [respond(text("one")), respond(text("two"))])
    first = keel("run", "--session", "s1", "--model", model, "hi", env=env, cwd=tmp_path)
    assert first.returncode == 0 and first.stdout == "one\n", first.stderr
    note = "keel: note: no Temporal known here, so keel runs its own, keeping the sessions in"
    assert f"{note} {home} (new)" in first.stderr
    assert (home / "temporal.db").exists()
    second = keel("run", "--session", "s1", "again", env=env, cwd=tmp_path)
    assert second.returncode == 0 and second.stdout == "two\n", second.stderr
    assert "note" not in second.stderr
    shown = keel("show", "s1", env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "assistant: two" in shown.stdout, shown.stderr


@pytest.mark.skipif(default_address_taken(), reason=f"something listens on {DEFAULT_ADDRESS}")
def test_keel_run_starts_its_temporal_on_the_port_asked_for(tmp_path: Path) -> None:
    env = keel_env()
    port = free_port()
    model = write_script(tmp_path / "s.json", [respond(text("on my port"))])
    done = keel("run", "--port", str(port), "--model", model, "hi", env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "on my port\n", done.stderr
    log = (tmp_path / ".keel" / "temporal.log").read_text()
    assert f"--port {port} " in log.splitlines()[0], log[:500]
    for bad in ("0", "65536", "http"):
        refused = keel("run", "--port", bad, "--model", model, "hi", env=env, cwd=tmp_path)
        assert refused.returncode == 2 and "is not a port" in refused.stderr, refused.stderr
