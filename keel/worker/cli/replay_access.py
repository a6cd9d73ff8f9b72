"""How ``keel replay``, ``fork``, ``export`` and ``eval`` reach recordings, and replay them.

- ``replay_model``: the model (and agent file) a replay runs with, checked before anything
  starts;
- ``recorded_access``: the connection and client of a command reading recorded sessions;
  with an embedded server, ``reading`` runs a worker that answers their queries, and
  ``replay_workers`` the workers the replays run on (each replay's tool modules, on its
  task queue);
- ``exported``: a session's recording as a case, refused clearly (exit 2) when it is
  encrypted and this process lacks the key.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from keel.activities.mcp import McpServerConfig
from keel.activities.store import EncryptionKeyError, Keyring
from keel.worker.cli.run_inputs import (
    UsageError,
    check_model,
    check_model_given,
    read_agent,
    sendable_model,
)
from keel.worker.cli.session_access import keel_client
from keel.worker.client.agent_files import AgentFile
from keel.worker.client.errors import SessionNotFound
from keel.worker.client.keel_client import KeelClient
from keel.worker.client.replays import ReplayCase
from keel.worker.encryption import ENCODING, KEY_ID, EncryptionCodec
from keel.worker.server.connection import TemporalConnection, open_connection
from keel.worker.server.guests import check_host_runs
from keel.worker.settings import Settings

# How long a replayed turn may take, by default, before the replay gives up on it.
TURN_TIMEOUT_S = 600.0


def replay_model(args: argparse.Namespace, settings: Settings) -> tuple[str, AgentFile | None]:
    """The model a replay runs with (``--model``, else ``--agent``'s), and the agent file.

    Checked before a server starts: the spec's provider and options, the agent file.

    Raises:
        UsageError: no model given, a spec no provider takes, or an agent file's problem.
    """
    check_model_given(args.model, None)
    agent = read_agent(args.agent, args.model or settings.model)
    model = args.model or (agent.config.model if agent is not None else None)
    if not model:
        raise UsageError(
            "give the model to replay with: --model SPEC (or an --agent FILE that names one)"
        )
    return model, agent


def turn_timeout(args: argparse.Namespace) -> float:
    """``--turn-timeout``, checked: how long a replayed turn may take.

    Raises:
        UsageError: not more than 0.
    """
    value: float = args.turn_timeout if args.turn_timeout is not None else TURN_TIMEOUT_S
    if not value > 0:
        raise UsageError("--turn-timeout must be more than 0 seconds")
    return value


def local_model(model: str, connection: TemporalConnection) -> str:
    """The model spec to send, checked as ``keel run`` checks it (preflight when embedded).

    Raises:
        UsageError: what the worker would find missing (the scripted file, say).
    """
    check_model(model, local=connection.embedded)
    return sendable_model(model)


class RecordedAccess:
    """A command's Temporal and client, for recorded sessions and their replays."""

    def __init__(self, connection: TemporalConnection, keel: KeelClient) -> None:
        """Wrap the command's connection and client."""
        self.connection = connection
        self.keel = keel

    @asynccontextmanager
    async def reading(self, sessions: Sequence[str]) -> AsyncIterator[None]:
        """While the block runs, the sessions' state can be queried.

        With an embedded server, a worker of workflows only answers on each session's task
        queue (nothing runs). Elsewhere the session's own workers answer.

        Raises:
            SessionNotFound: a session does not exist.
        """
        queues = []
        for session in sessions:
            if await self.keel.status(session) is None:
                raise SessionNotFound(f"no session {session!r}")
            queue = await self.keel.session_task_queue(session)
            if queue not in queues:
                queues.append(queue)
        async with AsyncExitStack() as stack:
            for queue in queues:
                await stack.enter_async_context(self.connection.reader(task_queue=queue))
            yield

    @asynccontextmanager
    async def replay_workers(
        self,
        queues: Mapping[str, Sequence[str]],
        mcp: Sequence[McpServerConfig] = (),
        *,
        what: str,
    ) -> AsyncIterator[None]:
        """While the block runs, a worker on each task queue with its tool modules.

        Only with an embedded server; with another command's, that command's worker must
        run the tool modules; with a Temporal of one's own, its workers do.

        Args:
            queues: the tool modules each task queue's replays need.
            mcp: the MCP servers of ``--mcp``.
            what: the recording, to name it when another command's worker lacks a tool.

        Raises:
            HostBusy: another command's worker does not run the tools.
            UsageError: ``--mcp`` with a Temporal of one's own.
        """
        connection = self.connection
        if mcp and not connection.embedded and connection.host_pid is None:
            raise UsageError(
                "--mcp configures the worker a command embeds; with a Temporal of your own "
                "(TEMPORAL_ADDRESS, or keel dev), give --mcp to keel worker or keel dev"
            )
        if connection.host_pid is not None:
            needs = [m for modules in queues.values() for m in modules]
            check_host_runs(
                connection.settings.home, connection.host_pid, connection.host_runs, what, needs
            )
        async with AsyncExitStack() as stack:
            if connection.embedded:
                for queue, modules in queues.items():
                    await stack.enter_async_context(
                        connection.worker(modules, task_queue=queue, mcp_servers=mcp)
                    )
            yield


@asynccontextmanager
async def recorded_access(
    settings: Settings, *, create: bool = False
) -> AsyncIterator[RecordedAccess]:
    """The connection and client of a command on recorded sessions.

    Args:
        settings: process settings.
        create: the command may start an embedded server on a new database (``keel eval``
            of case files needs no session of this folder); else ``NoServerFound`` when
            none is known.
    """
    async with open_connection(settings, create=_creating if create else None) as connection:
        yield RecordedAccess(connection, keel_client(connection, wait_for_worker=True))


def _creating(data_dir: Path) -> None:
    """Say on stderr that the command's embedded server keeps its replays in a new folder."""
    print(
        f"keel: note: no Temporal known here, so keel runs its own, keeping the replay "
        f"sessions in {data_dir} (new)",
        file=sys.stderr,
        flush=True,
    )


async def exported(
    keel: KeelClient, session: str, keyring: Keyring | None
) -> tuple[ReplayCase, bool]:
    """A session's recording as a case, read with the keys of this process.

    Returns:
        The case, and whether the session is encrypted (the case holds it decrypted).

    Raises:
        SessionNotFound: no such session.
        UsageError: the session is encrypted with a key this process lacks (naming the key
            and the variables that give it).
    """
    encrypted = await check_key(keel, session, keyring)
    try:
        return await keel.export_case(session), encrypted
    except EncryptionKeyError as err:
        raise UsageError(f"session {session!r} cannot be read: {err}") from err


async def check_key(keel: KeelClient, session: str, keyring: Keyring | None) -> bool:
    """Refuse a session whose start input this process cannot decrypt.

    The first event of its history is read as Temporal holds it, without a worker.

    Returns:
        Whether the session is encrypted.

    Raises:
        UsageError: naming the session's key id and ``KEEL_ENCRYPTION_KEY``.
    """
    handle = keel.client.get_workflow_handle(session)
    async for event in handle.fetch_history_events():
        attributes = event.workflow_execution_started_event_attributes
        for payload in attributes.input.payloads:
            if payload.metadata.get("encoding") != ENCODING:
                continue
            kid = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
            if keyring is None:
                raise UsageError(
                    f"session {session!r} is encrypted (key {kid}) and this process has no "
                    "key: set KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS) to the key its "
                    "workers have"
                )
            try:
                EncryptionCodec(keyring).decrypt(payload)
            except EncryptionKeyError as err:
                raise UsageError(
                    f"session {session!r} is encrypted with a key this process does not have "
                    f"({err}): set KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS) to the key "
                    "its workers have"
                ) from err
            return True
        return False
    return False
