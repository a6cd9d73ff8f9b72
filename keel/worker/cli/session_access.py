"""How a ``keel`` command reaches a session: its client, and a worker when it must embed one."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

from keel.activities.mcp import McpServerConfig
from keel.activities.store import open_store
from keel.worker.cli.follow import end_streamed_line
from keel.worker.cli.run_inputs import UsageError
from keel.worker.client.errors import SessionNotFound, WorkerWait
from keel.worker.client.keel_client import KeelClient
from keel.worker.server.connection import TemporalConnection, lasting_server, open_connection
from keel.worker.server.guests import check_host_runs
from keel.worker.settings import Settings

# What to do when no worker answers: said after each "no worker" line.
START_A_WORKER = "start one with `keel worker` (or `keel dev`)"
# How long a query may wait for a worker before ``keel show`` or ``keel pending`` gives up.
QUERY_TIMEOUT_S = 10.0


async def require_lasting_server(settings: Settings, what: str) -> None:
    """Refuse a command whose work must outlive it when only an embedded server would run.

    Without ``TEMPORAL_ADDRESS``, a ``keel dev`` serving this folder's ``KEEL_HOME`` or one
    on the default address, a command embeds a dev server that stops when it returns: a
    detached job or a schedule would stop with it.

    Raises:
        UsageError: naming ``what`` and pointing to ``keel dev``.
    """
    if await lasting_server(settings) is not None:
        return
    raise UsageError(
        f"{what} needs a Temporal server and a worker that outlive this command, and none "
        f"runs: start `keel dev` in another terminal (or set TEMPORAL_ADDRESS and run "
        f"`keel worker`), then try again"
    )


def say_waiting(wait: WorkerWait, *, own_worker: bool = False) -> None:
    """Tell the person on stderr that a request waits for a worker.

    Args:
        wait: what the request waits for.
        own_worker: the command runs the session's worker itself (an embedded server): it
            is slow to answer, so starting another is not the remedy the line suggests.
    """
    if wait.failing is not None:
        hint = ""
    elif own_worker:
        hint = "; this command runs that worker itself, which has not answered yet"
    else:
        hint = f"; {START_A_WORKER}"
    end_streamed_line(sys.stderr)  # not in the middle of a model's streamed text
    print(f"keel: {wait}{hint}", file=sys.stderr, flush=True)


def keel_client(connection: TemporalConnection, *, wait_for_worker: bool) -> KeelClient:
    """The client of a command.

    Args:
        connection: the command's Temporal.
        wait_for_worker: when no worker answers, keep asking and say so on stderr now and
            then (commands that follow a turn), instead of failing with ``NoWorker`` after
            ``QUERY_TIMEOUT_S``.
    """
    settings = connection.settings
    return KeelClient(
        connection.client,
        settings.task_queue,
        open_store(settings.store, settings.keyring()),
        query_timeout_s=QUERY_TIMEOUT_S,
        wait_for_worker=wait_for_worker,
        on_waiting=partial(say_waiting, own_worker=connection.embedded)
        if wait_for_worker
        else None,
    )


@dataclass
class SessionAccess:
    """What a command that acts on a session holds while it runs.

    Attributes:
        keel: the client.
        embedded: the command runs the Temporal server (and the worker) itself, which stop
            with it: a turn it leaves goes on when the next command runs here.
    """

    keel: KeelClient
    embedded: bool


@asynccontextmanager
async def existing_session(
    settings: Settings,
    session: str,
    *,
    writes: bool,
    wait_for_worker: bool,
    mcp: Sequence[McpServerConfig] = (),
) -> AsyncIterator[SessionAccess]:
    """A client for an existing session, with a worker when the server is embedded.

    The worker loads the session's tool modules, and connects ``mcp`` for its ``mcp:NAME``
    sources; a command that only reads uses ``reading_session`` instead.

    Args:
        settings: process settings.
        session: the session.
        writes: the command changes the session, so it must still run.
        wait_for_worker: the command follows the session: keep asking when no worker
            answers, instead of failing.
        mcp: the MCP servers of ``--mcp``, for the worker of an embedded server (ignored
            with the server of another command, whose worker runs the session).

    Raises:
        NoServerFound: no Temporal is known here (no database either).
        SessionNotFound: no such session.
        SessionClosed: ``writes``, and the session has ended.
        NoWorker: not ``wait_for_worker``, and no worker polls the session's task queue.
        UsageError: ``mcp`` with a Temporal of one's own, or an embedded server and a
            session whose MCP servers ``mcp`` does not name.
        HostBusy: the server is another command's, whose worker does not run the session.
    """
    async with open_connection(settings) as connection:
        if connection.host_pid is not None:
            mcp = ()  # another command's server: its worker has the MCP servers it was given
        if mcp and not connection.embedded:
            raise UsageError(
                "--mcp configures the worker a command embeds; with a Temporal of your own "
                "(TEMPORAL_ADDRESS, or keel dev), give --mcp to keel worker or keel dev"
            )
        keel = keel_client(connection, wait_for_worker=wait_for_worker)
        if writes:
            await keel.check_open(session)
        config = await keel.config(session)
        if connection.host_pid is not None:  # another command's worker must run this session
            check_host_runs(
                settings.home,
                connection.host_pid,
                connection.host_runs,
                session,
                config.tool_modules,
            )
        given = {server.name for server in mcp}
        missing = [m for m in config.tool_modules if m.startswith("mcp:") and m[4:] not in given]
        if connection.embedded and missing:
            raise UsageError(
                f"session {session!r} uses MCP servers ({', '.join(missing)}), which this "
                "command's own worker does not have: give it --mcp NAME=COMMAND|URL for each, "
                "as to keel run, or run `keel dev --mcp NAME=...` in another terminal"
            )
        if not wait_for_worker and not connection.embedded:
            await keel.check_worker(session)
        queue = await keel.session_task_queue(session)
        async with connection.worker(config.tool_modules, task_queue=queue, mcp_servers=mcp):
            yield SessionAccess(keel, connection.embedded)


@asynccontextmanager
async def reading_session(
    settings: Settings, session: str, *, wait_for_worker: bool
) -> AsyncIterator[SessionAccess]:
    """A client that reads an existing session: ``keel show``, ``pending``, ``watch``.

    Reading imports no tool and connects no MCP server. With an embedded server, a worker of
    workflows only answers the queries (the session's tools and model calls wait for a
    command that runs turns: ``keel wait``, ``approve``, ``run``).

    Raises:
        NoServerFound: no Temporal is known here (no database either).
        SessionNotFound: no such session.
        NoWorker: not ``wait_for_worker``, and no worker polls the session's task queue.
    """
    # following forever (keel watch), it does not keep another command's server up
    async with open_connection(settings, holds=not wait_for_worker) as connection:
        keel = keel_client(connection, wait_for_worker=wait_for_worker)
        if await keel.status(session) is None:
            raise SessionNotFound(f"no session {session!r}")
        if not wait_for_worker and not connection.embedded:
            await keel.check_worker(session)
        queue = await keel.session_task_queue(session)
        async with connection.reader(task_queue=queue):
            yield SessionAccess(keel, connection.embedded)
