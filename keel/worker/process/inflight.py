"""Attempts a dead worker left running, given back to Temporal by the next worker at once.

Temporal learns that a worker died holding an activity attempt only when the attempt's
heartbeat timeout passes, and each heartbeat that keeps a live attempt alive is billed (a
Temporal Cloud Action). Keel's workers also keep a journal of the attempts they run: a line
when one starts and one when it ends, in the user's state directory
(``$XDG_STATE_HOME/keel/inflight/``, default ``~/.local/state``), one file per worker process
and Temporal server (its cluster id, or its address when the server does not say, and the
namespace: two dev servers on one machine both have a ``default`` namespace, and a task token
of one means nothing to the other; a ``keel run`` started again after a crash starts its
embedded server on another port, on the same database, with the same cluster id). A worker that
starts reads the journals of processes that are gone (their pid,
start time and boot no longer run) and fails each attempt they left running
(``RespondActivityTaskFailed`` with its task token; error type ``KeelWorkerLost``, which
retries). Temporal retries it at once, as after a heartbeat timeout: a model call is asked
again, a ``write`` tool's next attempt asks a person (``outcome_unknown``). So a worker that
crashes and is restarted where it ran (a process manager, ``keel dev``, a container with its
state directory on a volume) hands its work on within its own start time, whatever the
heartbeat timeout; the heartbeat timeout stays the backstop for a machine that is gone or a
worker that hangs.

An attempt whose task token Temporal no longer knows (it ended, timed out, or another worker
reclaimed it first) is passed over. Journal directories are made 0700 and files 0600; a file
that is a link, or not the user's, is ignored.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflowservice.v1 import (
    GetClusterInfoRequest,
    RespondActivityTaskFailedRequest,
)
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from keel.worker.background import beside
from keel.worker.process.pids import alive, boot_id, same_process, started_at
from keel.workflows.activity_options import WORKER_LOST

logger = logging.getLogger(__name__)

# Below the user's state directory.
INFLIGHT_DIR = Path("keel") / "inflight"
# How often a running worker looks for journals of workers that died beside it.
RECLAIM_EVERY_S = 1.0
# A journal is emptied when nothing runs and it has grown past this.
COMPACT_BYTES = 256 * 1024
# Journals of dead workers of other servers older than this are removed by any worker.
FORGET_AFTER_S = 7 * 24 * 3600.0
_RPC_TIMEOUT = timedelta(seconds=5)
_GONE = frozenset({RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT})


def inflight_dir(state_home: str | os.PathLike[str]) -> Path:
    """Where the journals are: ``keel/inflight`` in the user's state directory."""
    return Path(state_home) / INFLIGHT_DIR


# Journals of dead workers of other servers that still name running attempts: read once,
# then passed over by this process's later looks (a dead writer's journal changes no more).
_passed_over: set[str] = set()
# The server address of each namespace this process's workers reclaim for (``reclaiming``):
# what a ``def`` activity, which has no client to ask, is journaled under.
_targets: dict[str, str] = {}
# The cluster id of each server address this process's workers reclaim for, as the server
# said (``reclaiming``); an address it is missing for stands for itself.
_clusters: dict[str, str] = {}


def server_key(target: str, namespace: str) -> str:
    """A journal's server, in its file name: the server's cluster id and the namespace, hashed.

    The address ``target`` stands in for a cluster id its server did not give.
    """
    return _hashed(_clusters.get(target, target), namespace)


@functools.lru_cache(maxsize=64)
def _hashed(server: str, namespace: str) -> str:
    """Cached: every activity attempt asks it (``_Journaled``), with the same few pairs."""
    return hashlib.sha256(f"{server}\n{namespace}".encode()).hexdigest()[:16]


def client_server_key(client: Client) -> str:
    """``server_key`` of the server and namespace ``client`` talks to."""
    return server_key(client.service_client.config.target_host, client.namespace)


async def learn_cluster(client: Client) -> None:
    """Ask ``client``'s server for its cluster id, which stays with its database.

    A server that does not answer (a permission, an old server) leaves its address as its
    name: journals then serve a worker that comes back on the same address only.
    """
    target = client.service_client.config.target_host
    try:
        info = await client.workflow_service.get_cluster_info(
            GetClusterInfoRequest(), timeout=_RPC_TIMEOUT
        )
    except RPCError as err:
        logger.info(
            "the server at %s gives no cluster id (%s): journals name it by address", target, err
        )
        return
    if info.cluster_id:
        _clusters[target] = info.cluster_id


@functools.cache
def _boot_key() -> str:
    """This machine's boot and host name.

    With the host name, the processes of another container that shares the state directory
    (its own pids, its own host name) are never taken for this one's.
    """
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    return (boot_id().replace("-", "")[:16] or "0") + host


@dataclass(frozen=True)
class JournalName:
    """What a journal's file name says: whose it is (boot, pid, start time) and its server."""

    boot: str
    pid: int
    started: int
    server: str

    @property
    def file(self) -> str:
        """``BOOT.PID.START.SERVER.log`` (``SERVER``: ``server_key``)."""
        return f"{self.boot}.{self.pid}.{self.started}.{self.server}.log"

    @classmethod
    def parse(cls, name: str) -> JournalName | None:
        """The journal a file name names, or None for any other file."""
        parts = name.split(".")
        if len(parts) != 5 or parts[4] != "log" or not (parts[1] + parts[2]).isdigit():
            return None
        return cls(parts[0], int(parts[1]), int(parts[2]), parts[3])

    def runs(self) -> bool:
        """Whether the process that writes it still runs."""
        if self.boot != _boot_key():
            return False
        return same_process(self.pid, self.started, boot_id())


class InflightJournal:
    """This process's journal of the activity attempts it runs for one server's namespace."""

    def __init__(self, directory: Path, server: str) -> None:
        """Name the file (``server``: ``server_key``); it is made with the first attempt."""
        me = os.getpid()
        self.path = directory / JournalName(_boot_key(), me, started_at(me) or 0, server).file
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._running = 0
        self._written = 0

    def started(self, token: bytes) -> None:
        """An attempt with this task token has started here."""
        self._write(b"+", token, +1)

    def ended(self, token: bytes) -> None:
        """The attempt has ended: its result (or failure) is on its way to Temporal."""
        self._write(b"-", token, -1)

    def _write(self, sign: bytes, token: bytes, change: int) -> None:
        line = sign + base64.b64encode(token) + b"\n"
        with self._lock:
            try:
                fd = self._open()
                if change < 0 and self._running == 1 and self._written > COMPACT_BYTES:
                    os.ftruncate(fd, 0)  # nothing else runs: the journal starts over
                    self._written = 0
                else:
                    os.write(fd, line)
                    self._written += len(line)
            except OSError as err:  # the journal is a help, never a reason to fail the work
                logger.warning("cannot keep the in-flight journal %s: %s", self.path, err)
            self._running += change

    def _open(self) -> int:
        if self._fd is None:
            private_dir(self.path.parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
            self._fd = os.open(self.path, flags, 0o600)
        return self._fd


def private_dir(directory: Path) -> None:
    """Make ``directory`` (0700) unless it is there; refuse one that others may write.

    Its parent, ``keel/`` in the state directory, is made 0700 too: the records of
    ``keel.worker.server.records`` refuse a ``keel/`` that others may write, and
    ``mkdir(parents=True)`` would make it with the umask's permissions.
    """
    directory.parent.parent.mkdir(parents=True, exist_ok=True)  # the state directory
    for level in (directory.parent, directory):
        level.mkdir(mode=0o700, exist_ok=True)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(f"{directory} is not a directory of yours alone")


_journals: dict[tuple[Path, str], InflightJournal] = {}
_journals_lock = threading.Lock()


def journal(directory: Path, server: str) -> InflightJournal:
    """The process's journal for ``server`` in ``directory`` (one per process and pair)."""
    key = (directory, server)
    with _journals_lock:
        found = _journals.get(key)
        if found is None:
            found = _journals[key] = InflightJournal(directory, server)
        return found


class InflightInterceptor(Interceptor):
    """Journals each activity attempt this worker runs, so that a later worker can reclaim it."""

    def __init__(self, state_home: str | os.PathLike[str]) -> None:
        """Keep the journals in ``state_home`` (``Settings.state_home``)."""
        self.directory = inflight_dir(state_home)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap each activity's execution."""
        return _Journaled(next, self.directory)


class _Journaled(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, directory: Path) -> None:
        super().__init__(next)
        self._directory = directory

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        try:
            target = activity.client().service_client.config.target_host
        except RuntimeError:  # a ``def`` activity has no client: its worker's, as reclaiming saw it
            target = _targets.get(info.namespace, "")
        kept = journal(self._directory, server_key(target, info.namespace))
        kept.started(info.task_token)
        try:
            return await self.next.execute_activity(input)
        finally:
            kept.ended(info.task_token)


def left_running(path: Path) -> list[bytes]:
    """The task tokens a journal says started and did not end, in order.

    A link, a file that is not the user's, or a line that is not a journal's is skipped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            logger.warning("ignoring the in-flight journal %s: not a file of yours", path)
            return []
        running: dict[bytes, None] = {}
        for line in f:
            sign, encoded = line[:1], line[1:].rstrip(b"\n")
            try:
                token = base64.b64decode(encoded, validate=True)
            except ValueError:
                continue
            if sign == b"+":
                running[token] = None
            elif sign == b"-":
                running.pop(token, None)
    return list(running)


@contextlib.asynccontextmanager
async def reclaiming(client: Client, state_home: str | os.PathLike[str]) -> AsyncIterator[None]:
    """Reclaim what dead workers left running now, then every ``RECLAIM_EVERY_S`` meanwhile.

    A worker runs in it (``KeelPlugin.run_worker``): what its dead predecessor left is given
    back before it polls, and what a worker beside it on this machine leaves when it dies, a
    moment later.
    """
    _targets[client.namespace] = client.service_client.config.target_host
    await learn_cluster(client)
    await reclaim_lost(client, state_home)

    async def again() -> None:
        while True:
            await asyncio.sleep(RECLAIM_EVERY_S)
            try:
                await reclaim_lost(client, state_home)
            except Exception as err:  # never stops the worker: the heartbeat timeout is there
                logger.warning("cannot reclaim dead workers' attempts: %s", err)

    async with beside(again()):
        yield


async def reclaim_lost(client: Client, state_home: str | os.PathLike[str]) -> int:
    """Fail the attempts that dead workers of ``client``'s server and namespace left running.

    A worker calls it as it starts, before it polls, then now and then (``reclaiming``).

    Returns:
        How many attempts Temporal took back (those it still knew).
    """
    directory = inflight_dir(state_home)
    server = client_server_key(client)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return 0
    taken = 0
    for name in names:
        if name in _passed_over:
            continue
        parsed = JournalName.parse(_claimed_by_the_dead(name))
        if parsed is None or parsed.runs():
            continue
        path = directory / name
        if parsed.server != server:
            _forget(path, name)
            continue
        claimed = directory / f".{name}.{os.getpid()}"
        try:  # one worker reclaims a journal: the others find it gone
            os.rename(path, claimed)
        except OSError:
            continue
        for token in left_running(claimed):
            taken += await _fail(client, token, parsed.pid)
        with contextlib.suppress(OSError):
            claimed.unlink()
    return taken


async def _fail(client: Client, token: bytes, pid: int) -> int:
    """Fail one attempt of a dead worker; 1 when Temporal still knew it."""
    error = ApplicationError(
        f"the worker running this attempt (pid {pid}) stopped without finishing it; the "
        "worker started after it gave it back",
        type=WORKER_LOST,
    )
    failure = Failure()
    await client.data_converter.encode_failure(error, failure)
    request = RespondActivityTaskFailedRequest(
        namespace=client.namespace, task_token=token, failure=failure, identity=client.identity
    )
    try:
        await client.workflow_service.respond_activity_task_failed(
            request, retry=True, timeout=_RPC_TIMEOUT
        )
    except RPCError as err:
        if err.status not in _GONE:
            logger.warning("cannot give back an attempt of dead worker %s: %s", pid, err)
        return 0
    logger.info("gave back an activity attempt that dead worker %s left running", pid)
    return 1


def _claimed_by_the_dead(name: str) -> str:
    """The journal's own name when ``name`` is one a reclaiming worker took and died with.

    A journal being reclaimed is ``.NAME.PID``, PID the reclaiming worker's: while that runs,
    the name is returned as it is (no journal's); once it is gone, ``NAME``.
    """
    inner, _, claimer = name[1:].rpartition(".")
    if not name.startswith(".") or not claimer.isdigit() or alive(int(claimer)):
        return name
    return inner


def _forget(path: Path, name: str) -> None:
    """Remove a dead worker's journal of another server, or pass over it from now on.

    Removed when nothing in it was left running (no worker needs it; a link is removed, not
    what it points to) or once it is old; else passed over by this process's later looks
    (its writer is dead: it changes no more).
    """
    with contextlib.suppress(OSError):
        if not left_running(path):
            path.unlink()
            return
        if time.time() - path.lstat().st_mtime > FORGET_AFTER_S:
            path.unlink()
            return
    _passed_over.add(name)
