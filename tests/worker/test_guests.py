"""An owner of an embedded server waits for the guests that hold it, and only for them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from keel.worker.server.guests import (
    HostBusy,
    HostEnded,
    check_host_runs,
    ending_with,
    guest_path,
    live_guests,
    wait_for_guests,
)
from keel.worker.server.records import write_private


def guest(home: Path, state: Path, pid: int, *, holds: bool, owner: int | None = None) -> Path:
    path = guest_path(home, state, pid)
    record = {"pid": pid, "owner_pid": owner or os.getpid(), "holds": holds}
    write_private(path, home, record)
    return path


async def test_the_owner_waits_for_holding_guests_only(tmp_path: Path) -> None:
    home, state = tmp_path / ".keel", tmp_path / "state"
    home.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    watcher = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        gone = subprocess.Popen(["true"])
        gone.wait()
        stale = guest(home, state, gone.pid, holds=True)
        guest(home, state, watcher.pid, holds=False)  # keel watch
        guest(home, state, other.pid, holds=True, owner=1)  # another owner's guest
        assert live_guests(home, state) == []
        assert not stale.exists()  # a guest that has ended is forgotten

        guest(home, state, sleeper.pid, holds=True)
        assert live_guests(home, state) == [sleeper.pid]
        started = time.monotonic()
        await wait_for_guests(home, state, grace_s=1.0)
        assert 0.9 < time.monotonic() - started < 5  # it waited, then gave up

        sleeper.kill()
        sleeper.wait()
        started = time.monotonic()
        await wait_for_guests(home, state, grace_s=10.0)
        assert time.monotonic() - started < 1
    finally:
        for proc in (sleeper, watcher, other):
            proc.kill()
            proc.wait()


async def test_a_guest_ends_when_its_host_ends() -> None:
    host = subprocess.Popen(["sleep", "30"])
    server = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(HostEnded, match=f"keel process {host.pid}, whose embedded"):
            async with ending_with(host.pid, server.pid):
                server.kill()
                server.wait()
                await asyncio.sleep(30)
        async with ending_with(host.pid, os.getpid()):
            pass  # both alive: the block ends as it would
    finally:
        for proc in (host, server):
            proc.kill()
            proc.wait()


def test_a_guest_acts_only_on_what_the_host_runs(tmp_path: Path) -> None:
    check_host_runs(tmp_path, 42, ("tools", "mcp:files"), "s", ["tools", "mcp:files"])
    check_host_runs(tmp_path, 42, (), "s", [])
    with pytest.raises(HostBusy, match="keel process 42, which runs no worker for session 's'"):
        check_host_runs(tmp_path, 42, None, "s", [])
    with pytest.raises(HostBusy, match="runs a worker without mcp:files, other for session"):
        check_host_runs(tmp_path, 42, ("tools",), "s", ["tools", "mcp:files", "other"])
