"""Where a command's Temporal comes from: a configured server, or an embedded dev server.

In order: ``TEMPORAL_ADDRESS``; the ``keel dev`` that serves this ``KEEL_HOME`` (its address
recorded in the user's state directory and verified, ``keel.worker.server.dev_record``);
the server another command embeds on this ``KEEL_HOME`` (an embedded ``keel run``), for a
command that only reads or decides, which uses it as a guest (``keel.worker.server.guests``);
whatever listens on ``127.0.0.1:7233`` (a ``keel dev`` elsewhere); else a dev server this
command embeds, on ``KEEL_HOME``'s database, which only ``keel run`` may create
(``open_connection``). A server found without ``TEMPORAL_ADDRESS`` is named on a terminal.
Only a command that starts a server needs the folder's lock: one that would find another
command's embedded server but must run its own (``keel run``) is refused while it runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from keel.activities.mcp import McpServerConfig
from keel.activities.store import open_store
from keel.activities.tools import ToolModuleError, tool_module_name
from keel.worker.process.assembly import build_worker, connect, mcp_servers_running
from keel.worker.process.configured import connect_configured
from keel.worker.process.sandbox import sandbox_runner
from keel.worker.server.dev_record import ServerRecord, note_worker, read_record
from keel.worker.server.devserver import DEFAULT_ADDRESS, DevServer, address_reachable
from keel.worker.server.guests import ending_with, guest_of, wait_for_guests
from keel.worker.server.tool_files import tool_entries
from keel.worker.settings import Settings
from keel.workflows.session import AgentSession

logger = logging.getLogger(__name__)


_SAID: set[str] = set()  # the servers named on the terminal already


class NoServerFound(Exception):
    """No Temporal is known here, and this command may not create one (the CLI exits 2)."""


@dataclass
class TemporalConnection:
    """A connected client, and the embedded dev server when this process runs one.

    Attributes:
        client: the client.
        address: the server's address.
        settings: the settings that reach it.
        server: the dev server this process embeds, if it does.
        host_pid: the keel process whose embedded server this command uses as a guest, if
            it does: that process runs the worker, and the server stops when it ends.
        host_runs: the tool modules (and ``mcp:NAME``) that process's worker runs; None
            when it runs none (only a reader, or a Keel that does not say).
    """

    client: Client
    address: str
    settings: Settings
    server: DevServer | None = None
    host_pid: int | None = None
    host_runs: tuple[str, ...] | None = None

    @property
    def embedded(self) -> bool:
        """Whether this process embeds the server (and so must run a worker too)."""
        return self.server is not None

    @asynccontextmanager
    async def worker(
        self,
        tool_modules: Sequence[str] = (),
        *,
        task_queue: str | None = None,
        mcp_servers: Sequence[McpServerConfig] = (),
    ) -> AsyncIterator[None]:
        """Run an in-process worker while the block runs, when the server is embedded.

        Args:
            tool_modules: tool modules to load: names, or files' paths (remembered in
                ``KEEL_HOME`` for the next command, ``keel.worker.server.tool_files``).
            task_queue: the queue to poll (a session's own); default ``KEEL_TASK_QUEUE``.
            mcp_servers: MCP servers for the worker, connected before the block starts.

        Raises:
            McpServerError: an MCP server did not start (before the block runs).
        """
        if self.server is None:
            yield
            return
        queue = task_queue or self.settings.task_queue
        store = open_store(self.settings.store, self.settings.keyring())
        modules = tool_entries(self.settings.home, tool_modules, self.settings.state_home)
        runs = [_module_name(m) for m in tool_modules]
        runs += [f"mcp:{server.name}" for server in mcp_servers]
        async with mcp_servers_running(mcp_servers) as mcp:
            async with build_worker(
                self.client,
                queue,
                modules,
                store=store,
                mcp_servers=mcp or (),
                settings=self.settings,
            ):
                note_worker(self.settings.home, self.settings.state_home, runs)
                try:
                    yield
                    await self._guests_gone()
                finally:
                    note_worker(self.settings.home, self.settings.state_home, None)

    @asynccontextmanager
    async def reader(self, *, task_queue: str | None = None) -> AsyncIterator[None]:
        """With an embedded server, a worker that answers queries while the block runs.

        It runs the session workflow only: no activity, no tool module imported, no MCP
        server; what a turn would run waits for a worker that has them.
        """
        if self.server is None:
            yield
            return
        worker = Worker(
            self.client,
            task_queue=task_queue or self.settings.task_queue,
            workflows=[AgentSession],
            workflow_runner=sandbox_runner(),
        )
        async with worker:
            yield
            await self._guests_gone()

    async def _guests_gone(self) -> None:
        """With an embedded server, wait a little for the commands that use it as guests."""
        if self.server is not None:
            await wait_for_guests(self.settings.home, self.settings.state_home)


def _module_name(entry: str) -> str:
    """The module name of a ``--tools`` entry, as a session's ``tool_modules`` has it."""
    try:
        return tool_module_name(entry)
    except ToolModuleError:
        return entry


async def lasting_server(settings: Settings) -> Settings | None:
    """The settings that reach a Temporal outliving this command; None when none is known.

    ``TEMPORAL_ADDRESS``; else the ``keel dev`` recorded for ``KEEL_HOME`` while it runs,
    verified (its address put in ``address``); else whatever listens on the default address.
    The last two are named on a terminal: the command found them by itself.
    """
    if settings.address:
        return settings
    found = dev_server(settings)
    if found is not None:
        return found
    if await address_reachable(DEFAULT_ADDRESS):
        say_found(f"the Temporal listening on {DEFAULT_ADDRESS} (TEMPORAL_ADDRESS is not set)")
        return settings
    return None


def dev_server(settings: Settings) -> Settings | None:
    """The settings that reach the ``keel dev`` serving ``KEEL_HOME``, verified; else None.

    Said on a terminal when found. ``TEMPORAL_ADDRESS`` is not looked at.
    """
    record = read_record(settings.home, settings.state_home)
    if record is None or not record.shared:
        return None
    home = Path(settings.home).resolve()
    say_found(f"`keel dev` (process {record.owner_pid}) at {record.address}, serving {home}")
    return dataclasses.replace(settings, address=record.address)


def embedded_elsewhere(settings: Settings) -> tuple[Settings, ServerRecord] | None:
    """The server another keel process embeds on ``KEEL_HOME``, verified; else None.

    The settings that reach it (its address, and the namespace it serves), and its record.
    Said on a terminal when found. ``TEMPORAL_ADDRESS`` is not looked at.
    """
    record = read_record(settings.home, settings.state_home)
    if record is None or record.shared or record.owner_pid == os.getpid():
        return None
    home = Path(settings.home).resolve()
    say_found(
        f"the Temporal that keel process {record.owner_pid} runs at {record.address} on "
        f"{home} (it stops when that command ends)"
    )
    namespace = record.namespace or settings.namespace
    return dataclasses.replace(settings, address=record.address, namespace=namespace), record


def say_found(what: str) -> None:
    """On a terminal, name the Temporal a command found by itself, once (scripts see nothing)."""
    if sys.stderr.isatty() and what not in _SAID:
        _SAID.add(what)
        print(f"keel: using {what}", file=sys.stderr, flush=True)


def nowhere(settings: Settings) -> str:
    """Where a command looked for Temporal and found none, and how to point it at one."""
    home = Path(settings.home).resolve()
    return (
        f"no Temporal server found: TEMPORAL_ADDRESS is not set, no `keel dev` serves {home} "
        f"and there is no sessions' database in it (temporal.db), and nothing listens on "
        f"{DEFAULT_ADDRESS}; run this in the folder where you ran `keel run` (or set KEEL_HOME "
        "to its .keel), start `keel dev` there, or set TEMPORAL_ADDRESS"
    )


@asynccontextmanager
async def open_connection(
    settings: Settings,
    *,
    embed: bool = True,
    create: Callable[[Path], None] | None = None,
    port: int | None = None,
    holds: bool = True,
) -> AsyncIterator[TemporalConnection]:
    """Connect to Temporal, embedding a dev server when none is known.

    A Temporal that outlives this command (``lasting_server``: ``TEMPORAL_ADDRESS``, the
    ``keel dev`` serving ``KEEL_HOME``, something on the default address) is only connected
    to. So is, by a command that may not create a database (``create`` None: one that reads
    or decides), the server another keel process embeds on ``KEEL_HOME`` while it runs:
    ``TemporalConnection.host_pid`` names that process, which runs the worker. Otherwise,
    when ``embed`` is true, this starts the dev server with its SQLite database under
    ``KEEL_HOME`` (``.keel/``, so sessions survive for the next command) and stops it on exit;
    ``TemporalConnection.worker`` then runs a worker in this process, and, done, waits a little
    for the commands using its server as guests.

    Args:
        settings: process settings.
        embed: whether an embedded server may be started.
        create: whether this command may create the database when ``KEEL_HOME`` has none
            (``keel run``): called with the data directory first, to say so. None: it may
            not, and ``NoServerFound`` says where it looked.
        port: the embedded server's port (default: a free one).
        holds: with another command's server, that command, done, waits a little for this
            one before stopping it (False: a command that would follow forever, ``keel
            watch``). When it stops it anyway, this one ends with ``HostEnded``.

    Raises:
        NoServerFound: no Temporal is known, no database is there, and ``create`` is None.
        TemporalUnreachable: the known Temporal does not answer.
        HostEnded: the command whose server this one used ended first.
    """
    borrowed = None
    if embed and create is None and not settings.address:
        borrowed = embedded_elsewhere(settings)
    if borrowed is not None:
        guest, record = borrowed
        with guest_of(settings.home, settings.state_home, record.owner_pid, holds=holds):
            async with ending_with(record.owner_pid, record.server_pid):
                client, address = await connect_configured(guest)
                yield TemporalConnection(
                    client=client,
                    address=address,
                    settings=guest,
                    host_pid=record.owner_pid,
                    host_runs=record.runs,
                )
        return
    lasting = await lasting_server(settings)
    if lasting is not None or not embed:
        settings = lasting or settings
        client, address = await connect_configured(settings)
        yield TemporalConnection(client=client, address=address, settings=settings)
        return
    server = DevServer(
        settings.home,
        ui=False,
        namespace=settings.namespace,
        port=port,
        cli=settings.temporal_cli,
        state_home=settings.state_home,
    )
    if not server.db_path.exists():
        if create is None:
            raise NoServerFound(nowhere(settings))
        create(server.data_dir)
    if sys.stderr.isatty():  # a person waits: say why (scripts and tests read stderr as is)
        print(
            f"keel: starting the embedded Temporal in {server.data_dir} (a few seconds; "
            "`keel dev` in another terminal keeps one running)",
            file=sys.stderr,
            flush=True,
        )
    async with server:
        logger.info("started embedded Temporal dev server at %s", server.address)
        client = await connect(server.address, settings.namespace, keyring=settings.keyring())
        yield TemporalConnection(
            client=client, address=server.address, settings=settings, server=server
        )
