"""Commands that use another command's embedded server: their records, and the owner's wait.

While an embedded ``keel run`` holds a folder, a command that only reads or decides
(``keel pending``, ``show``, ``approve`` ...) from another terminal connects to that server
instead of starting one (``keel.worker.server.connection``). It is the server's guest: it
writes ``guest-<pid>.json`` among the folder's records in the user's state directory
(``keel.worker.server.records``) while it runs, and the owner, done with its own work, keeps
its server and worker up a little longer for the guests that hold it (a ``keel approve``
that follows the turn it unblocked to its end), then stops them anyway; a ``keel watch``,
which would follow forever, does not hold it. A guest whose host ends, ends too
(``HostEnded``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from keel.worker.process.configured import TemporalUnreachable
from keel.worker.process.pids import alive
from keel.worker.server.devserver import DevServerError
from keel.worker.server.records import read_private, records_dir, remove, write_private

logger = logging.getLogger(__name__)

GUEST_PREFIX = "guest-"
"""Among a ``KEEL_HOME``'s records: ``guest-<pid>.json``, a command using another's server."""

GUEST_GRACE_S = 10.0
"""How long an owner waits for its guests before it stops its server anyway."""

_POLL_S = 0.1
_WATCH_S = 0.5


class HostEnded(TemporalUnreachable):
    """The command whose embedded server a guest used has ended, and its server with it."""


class HostBusy(DevServerError):
    """The command that holds the folder's server runs no worker for what a guest would do."""


def check_host_runs(
    home: str | os.PathLike[str],
    host_pid: int,
    runs: Sequence[str] | None,
    session: str,
    needs: Sequence[str],
) -> None:
    """Make sure the host's worker runs the tools of ``session`` a guest would act on.

    Args:
        home: the ``KEEL_HOME``.
        host_pid: the keel process that holds its server.
        runs: the tool modules (and ``mcp:NAME``) its worker runs; None: it runs none.
        session: the session.
        needs: the session's ``tool_modules``.

    Raises:
        HostBusy: the host runs no worker, or one without some of the session's tools: the
            turn would wait, or its tools fail, until the host ends.
    """
    if runs is None:
        lacking = "runs no worker"
    else:
        missing = [module for module in needs if module not in runs]
        if not missing:
            return
        lacking = f"runs a worker without {', '.join(missing)}"
    raise HostBusy(
        f"the embedded Temporal in {Path(home).resolve()} is in use by keel process {host_pid}, "
        f"which {lacking} for session {session!r}: wait for it to end, or run `keel dev` once "
        "and let every terminal share it"
    )


def guest_path(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None, pid: int
) -> Path:
    """The record of the guest process ``pid`` on ``home``'s server."""
    return records_dir(home, state_home) / f"{GUEST_PREFIX}{pid}.json"


@contextmanager
def guest_of(
    home: str | os.PathLike[str],
    state_home: str | os.PathLike[str] | None,
    owner_pid: int,
    *,
    holds: bool = True,
) -> Iterator[None]:
    """Record this process as a guest of ``owner_pid``'s server on ``home`` for the block.

    Without a record (a state directory that cannot be written) the command still runs: its
    owner just does not wait for it.

    Args:
        home: the ``KEEL_HOME``.
        state_home: the user's state directory (``Settings.state_home``).
        owner_pid: the keel process that runs the server.
        holds: the owner, done, waits for this command (one that ends by itself).
    """
    path = guest_path(home, state_home, os.getpid())
    try:
        write_private(path, home, {"pid": os.getpid(), "owner_pid": owner_pid, "holds": holds})
    except OSError as err:
        logger.warning(
            "cannot record this command as a guest of keel process %s: %s", owner_pid, err
        )
    try:
        yield
    finally:
        remove(path)


def live_guests(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None
) -> list[int]:
    """The guests that hold this process's server on ``home`` and still run.

    A record whose process has ended is removed.
    """
    folder = records_dir(home, state_home)
    try:
        paths = sorted(folder.glob(f"{GUEST_PREFIX}*.json"))
    except OSError:
        return []
    found = []
    for path in paths:
        data = read_private(path, home)
        if data is None:
            continue
        try:
            pid, owner = int(str(data["pid"])), int(str(data["owner_pid"]))
        except (KeyError, ValueError):
            remove(path)
            continue
        if owner != os.getpid() or data.get("holds") is False:
            continue
        if pid == os.getpid() or not alive(pid):
            remove(path)
            continue
        found.append(pid)
    return found


async def wait_for_guests(
    home: str | os.PathLike[str],
    state_home: str | os.PathLike[str] | None,
    grace_s: float = GUEST_GRACE_S,
) -> None:
    """Wait, up to ``grace_s``, for the guests of this process's server on ``home`` to end.

    Said on stderr when there are any: the person sees why the command does not return yet.
    """
    guests = live_guests(home, state_home)
    if not guests:
        return
    names = ", ".join(str(pid) for pid in guests)
    print(
        f"keel: keel process {names} uses this command's Temporal: waiting for it to end "
        f"(up to {grace_s:g} s) before stopping it",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + grace_s
    while guests and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
        guests = live_guests(home, state_home)
    if guests:
        logger.warning("stopping the embedded Temporal while keel process %s still uses it", names)


@asynccontextmanager
async def ending_with(owner_pid: int, server_pid: int) -> AsyncIterator[None]:
    """Run the block until it ends, or until the host's process or server ends: ``HostEnded``.

    Raises:
        HostEnded: the keel process ``owner_pid`` or its server ``server_pid`` ended first.
    """
    task = asyncio.current_task()
    assert task is not None
    ended = False

    async def watch() -> None:
        nonlocal ended
        while alive(owner_pid) and alive(server_pid):
            await asyncio.sleep(_WATCH_S)
        ended = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if not ended:
            raise
        task.uncancel()
        raise HostEnded(
            f"keel process {owner_pid}, whose embedded Temporal this command used, has ended, "
            "and its server with it; run the command again (it then starts its own), or run "
            "`keel dev` to share one server between terminals"
        ) from None
    finally:
        watcher.cancel()
