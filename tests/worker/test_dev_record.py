"""Records commands trust are verified: a forged one is ignored with a warning, never followed."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from keel.worker.server.database_record import UntrustedDatabase
from keel.worker.server.dev_record import check_server, read_record, record_path
from keel.worker.server.devserver import DevServer
from keel.worker.server.records import read_private, records_dir, write_private
from keel.worker.server.tool_files import tool_entries, tool_files_path
from tests.helpers.temporal import free_port

INSTALLED = "keel.activities.examples.workspace"


@pytest.fixture
def sleeper() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


async def test_only_a_live_keel_dev_of_this_user_on_this_folder_passes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, sleeper: subprocess.Popen[bytes]
) -> None:
    state, home, other = tmp_path / "state", tmp_path / "a" / ".keel", tmp_path / "b" / ".keel"
    other.mkdir(parents=True)
    async with DevServer(home, ui=False, shared=True, state_home=state) as server:
        found = read_record(home, state)
        assert found is not None and found.address == server.address and found.shared
        assert check_server(found, home) is None
        port = server.port

        # the same record, copied for another folder: its server does not serve that folder
        data = read_private(record_path(home, state), home)
        assert data is not None
        write_private(record_path(other, state), other, data)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert read_record(other, state) is None
        [warned] = caplog.messages
        assert "ignoring the server record" in warned
        assert f"is not a Temporal dev server on {other.resolve()}" in warned

        # a record naming a place that is not loopback
        away = dataclasses.replace(found, address=f"10.1.2.3:{port}")
        assert "is not a loopback address" in (check_server(away, home) or "")
        named = dataclasses.replace(found, address=f"localhost.evil.example:{port}")
        assert "is not a loopback address" in (check_server(named, home) or "")
        # another port than the one the server listens on
        moved = dataclasses.replace(found, address=f"127.0.0.1:{port + 1}")
        assert "does not listen on" in (check_server(moved, home) or "")
        # processes of another user
        assert "not to you" in (check_server(found, home, uid=os.getuid() + 1) or "")
        # a live process of ours that is no Temporal server, or not the owner's child
        impostor = dataclasses.replace(found, server_pid=sleeper.pid, owner_pid=os.getpid())
        assert "is not a Temporal dev server" in (check_server(impostor, home) or "")
        stranger = dataclasses.replace(found, owner_pid=sleeper.pid)
        assert "was not started by process" in (check_server(stranger, home) or "")
        pid_one = dataclasses.replace(found, server_pid=1, owner_pid=1)
        assert check_server(pid_one, home) is not None
    assert read_record(home, state) is None  # stopped: its record removed
    assert not record_path(home, state).exists()


async def test_the_record_is_the_users_alone(tmp_path: Path) -> None:
    state, home = tmp_path / "state", tmp_path / "a" / ".keel"
    async with DevServer(home, ui=False, shared=True, state_home=state) as server:
        path = record_path(home, state)
        assert path.parent == records_dir(home, state)
        assert not (home / "server.json").exists()  # nothing in the folder
        assert path.stat().st_mode & 0o777 == 0o600
        for directory in (path.parent, path.parent.parent, path.parent.parent.parent):
            assert directory.stat().st_mode & 0o777 == 0o700
            assert directory.stat().st_uid == os.getuid()
        data = json.loads(path.read_text())
        assert data["home"] == str(home.resolve()) and data["address"] == server.address


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_record_owned_by_another_user_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state, home = tmp_path / "state", tmp_path / "a" / ".keel"
    home.mkdir(parents=True)
    path = tool_files_path(home, state)
    write_private(path, home, {"modules": {"nowhere_mod": str(tmp_path / "x.py")}})
    os.chown(path, 65534, 65534)
    with caplog.at_level(logging.WARNING):
        assert read_private(path, home) is None
    assert "belongs to user 65534" in caplog.text


def test_a_remembered_file_never_hides_an_importable_module(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, home = tmp_path / "state", tmp_path / ".keel"
    home.mkdir()
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.py"
    evil.write_text("raise SystemExit('evil ran')\n")
    mine = tmp_path / "lib" / "mytools_x1.py"
    mine.parent.mkdir()
    mine.write_text("")
    # even a record in the trusted place cannot put a file in place of an installed module
    write_private(
        tool_files_path(home, state), home, {"modules": {INSTALLED: str(evil), "json": str(evil)}}
    )
    assert tool_entries(home, [INSTALLED, "json"], state) == [INSTALLED, "json"]
    # what it is for: a file given once is found by its name by the next command
    assert tool_entries(home, [str(mine)], state) == [str(mine)]
    assert tool_entries(home, ["mytools_x1"], state) == [str(mine)]
    # the old place is never read, and says so once
    (home / "tool_files.json").write_text(json.dumps({"other_x2": str(evil)}))
    with caplog.at_level(logging.WARNING):
        assert tool_entries(home, ["other_x2"], state) == ["other_x2"]
        assert tool_entries(home, ["other_x2"], state) == ["other_x2"]
    said = [m for m in caplog.messages if "tool_files.json" in m]
    assert len(said) == 1 and "never trusted" in said[0], caplog.messages


async def test_a_database_keel_did_not_make_here_is_refused_until_adopted(tmp_path: Path) -> None:
    state, mine, copy = tmp_path / "state", tmp_path / "a" / ".keel", tmp_path / "b" / ".keel"
    async with DevServer(mine, ui=False, state_home=state):
        pass
    async with DevServer(mine, ui=False, state_home=state):
        pass  # made here: accepted again
    copy.parent.mkdir()
    shutil.copytree(mine, copy)
    with pytest.raises(UntrustedDatabase, match="was not made by Keel for this folder"):
        await DevServer(copy, ui=False, state_home=state).start()
    # a file put in place of the recorded one is another file
    (mine / "temporal.db").rename(mine / "old.db")
    shutil.copy(copy / "temporal.db", mine / "temporal.db")
    with pytest.raises(UntrustedDatabase):
        await DevServer(mine, ui=False, state_home=state).start()
    # a link to the recorded file is not the file
    (mine / "temporal.db").unlink()
    (mine / "temporal.db").symlink_to(mine / "old.db")
    with pytest.raises(UntrustedDatabase):
        await DevServer(mine, ui=False, state_home=state).start()
    # the person says it is theirs: adopted once, accepted from then on
    async with DevServer(copy, ui=False, state_home=state, adopt_database=True):
        pass
    async with DevServer(copy, ui=False, state_home=state):
        pass
    assert not (copy / "database.json").exists()  # the record is not in the folder


def test_a_file_closed_while_its_descriptors_are_read_does_not_hide_the_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy server closes files between the listing of its descriptors and their reading.

    Seen in full runs under load: one vanished descriptor made a live server's record read
    as "does not listen", and the record was ignored.
    """
    import socket

    from keel.worker.server import dev_record

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert dev_record._listens(os.getpid(), port)
        real = os.readlink

        def closing(path: Any) -> str:
            if str(path).endswith("/fd/0"):
                raise FileNotFoundError(path)  # closed since the listing
            return real(path)

        monkeypatch.setattr(dev_record.os, "readlink", closing)
        assert dev_record._listens(os.getpid(), port)


def test_a_listening_socket_missing_from_one_reading_of_proc_net_tcp_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/proc/net/tcp is written a page at a time: a reading can skip a live server's row.

    Seen in a full run: a second terminal took the embedded server of the first, which was
    serving, for one that does not listen, and warned so.
    """
    import socket

    from keel.worker.server import dev_record

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        real = dev_record._listens_once
        readings: list[bool] = []

        def skipping(pid: int, at: int) -> bool:
            readings.append(real(pid, at))
            return readings[-1] and len(readings) > 1  # the first reading missed the row

        monkeypatch.setattr(dev_record, "_listens_once", skipping)
        assert dev_record._listens(os.getpid(), port)
        assert readings == [True, True]
        readings.clear()
        assert not dev_record._listens(os.getpid(), free_port())
        assert readings == [False] * dev_record._LISTEN_LOOKS
