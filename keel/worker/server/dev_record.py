"""The record of the dev server running on a ``KEEL_HOME``, and how it is checked.

A ``DevServer`` writes ``server.json`` among ``KEEL_HOME``'s records in the user's state
directory (``keel.worker.server.records``) while it runs: the lock that keeps two servers off
one database, and, for ``keel dev``, the address later commands on that ``KEEL_HOME``
connect to. Before a command follows it, the record is verified beyond its place (on Linux,
from ``/proc``): the address is loopback; the keel process and the ``temporal`` process are
this user's; the server is a child of that keel process, a ``temporal server start-dev`` on
``KEEL_HOME``'s database; and it listens on the recorded loopback port. A record that fails
is ignored with a one-line warning; one whose processes have ended is stale and ignored
quietly.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from keel.worker.process.pids import alive
from keel.worker.server.records import (
    ignore_old,
    read_private,
    real_home,
    records_dir,
    warn_once,
    write_private,
)

RECORD_FILE = "server.json"
"""Among a ``KEEL_HOME``'s records: its live server, the process that owns it, if shared."""

_PROC = Path("/proc")
_LISTEN = "0A"
# How often, and how far apart, a record's server is looked for among the listening sockets.
_LISTEN_LOOKS = 3
_LISTEN_PAUSE_S = 0.05


@dataclass(frozen=True)
class ServerRecord:
    """What ``server.json`` says of the dev server running on a ``KEEL_HOME``.

    Attributes:
        address: where clients connect, ``127.0.0.1:<port>``.
        server_pid: the ``temporal`` process.
        owner_pid: the keel process that started it and stops it.
        shared: started by ``keel dev`` for every command on this directory to use; else a
            command's own embedded server (``keel run``): the lock on the directory, which
            commands that only read or decide still use while it runs (as guests,
            ``keel.worker.server.guests``), and no other command may start a server on.
        namespace: the namespace it serves; None in a record of an older Keel.
        runs: for an embedded server, the tool modules (and ``mcp:NAME`` servers) of the
            worker its keel process runs, once it runs one; None while it runs none.
    """

    address: str
    server_pid: int
    owner_pid: int
    shared: bool
    namespace: str | None = None
    runs: tuple[str, ...] | None = None


def record_path(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> Path:
    """Where the server record of ``home`` is (``home`` being ``KEEL_HOME``)."""
    return records_dir(home, state_home) / RECORD_FILE


def parse_record(data: dict[str, object]) -> ServerRecord | None:
    """The record in a ``server.json``'s fields; None when malformed."""
    try:
        return ServerRecord(
            address=str(data["address"]),
            server_pid=int(str(data["server_pid"])),
            owner_pid=int(str(data["owner_pid"])),
            shared=data.get("shared") is True,
            namespace=str(data["namespace"]) if data.get("namespace") else None,
            runs=_names(data.get("runs")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _names(value: object) -> tuple[str, ...] | None:
    """A list of names in a record; None when absent or not a list of strings."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def note_worker(
    home: str | os.PathLike[str],
    state_home: str | os.PathLike[str] | None,
    runs: list[str] | None,
) -> None:
    """Add to this process's server record what its worker runs (None: no worker now).

    The commands that use the server as guests act only on sessions whose tools it runs.
    """
    path = record_path(home, state_home)
    data = read_private(path, home)
    if data is None or data.get("owner_pid") != os.getpid():
        return
    data.pop("home", None)
    try:
        write_private(path, home, {**data, "runs": runs})
    except OSError as err:
        warn_once(f"note:{path}", "cannot note this command's worker in %s: %s", path, err)


def read_record(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> ServerRecord | None:
    """The dev server recorded for ``home`` while it runs, verified; else None.

    ``server.json`` in ``home`` itself (the old place) is never read: a warning says so once.
    """
    path = record_path(home, state_home)
    ignore_old(home, RECORD_FILE, path.parent)
    data = read_private(path, home)
    found = parse_record(data) if data is not None else None
    if found is None:
        return None
    if not (alive(found.owner_pid) and alive(found.server_pid)):
        return None  # stale: a keel process killed before it could remove its record
    problem = check_server(found, home)
    if problem is not None:
        warn_once(f"server:{path}:{problem}", "ignoring the server record %s: %s", path, problem)
        return None
    return found


def check_server(
    record: ServerRecord, home: str | os.PathLike[str], uid: int | None = None
) -> str | None:
    """Why ``record`` is not a live dev server of ``uid`` serving ``home``; None when it is.

    Without ``/proc`` (not Linux) only the address and the processes' liveness are checked:
    the record's place is then what vouches for it.
    """
    uid = os.getuid() if uid is None else uid
    host, _, port_text = record.address.rpartition(":")
    if not _is_loopback(host.strip("[]")) or not port_text.isdigit():
        return f"its address {record.address} is not a loopback address"
    port = int(port_text)
    if not (alive(record.owner_pid) and alive(record.server_pid)):
        return "its processes are not running"
    if not (_PROC / "self").is_dir():
        return None
    for pid in (record.owner_pid, record.server_pid):
        owner = _uid(pid)
        if owner != uid:
            return f"process {pid} belongs to user {owner}, not to you ({uid})"
    if _parent(record.server_pid) != record.owner_pid:
        return f"process {record.server_pid} was not started by process {record.owner_pid}"
    argv = _cmdline(record.server_pid)
    if not serves(argv, home):
        return f"process {record.server_pid} is not a Temporal dev server on {real_home(home)}"
    if _flag(argv, "--port") != str(port) or not _listens(record.server_pid, port):
        return f"process {record.server_pid} does not listen on {record.address}"
    return None


def serves(argv: list[str], home: str | os.PathLike[str]) -> bool:
    """Whether a command line is ``temporal server start-dev`` on ``home``'s database."""
    database = str(Path(real_home(home)) / "temporal.db")
    return "start-dev" in argv and _flag(argv, "--db-filename") in (database,)


def serves_pid(pid: int, home: str | os.PathLike[str]) -> bool:
    """Whether process ``pid`` is this user's dev server on ``home`` (True where unknowable)."""
    if not (_PROC / "self").is_dir():
        return True
    return _uid(pid) == os.getuid() and serves(_cmdline(pid), home)


def _is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _uid(pid: int) -> int | None:
    """The real user id of a process; None when it cannot be read."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _parent(pid: int) -> int | None:
    try:
        return int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part]


def _flag(argv: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in a command line (the last one)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(name + "="):
            found = arg[len(name) + 1 :]
    return found


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on ``port`` of a loopback address.

    Looked for up to ``_LISTEN_LOOKS`` times: the kernel writes ``/proc/net/tcp`` a page at a
    time, and on a machine that opens and closes many sockets a reading can skip a row (a
    live server, read once, was taken for one that does not listen).
    """
    for look in range(_LISTEN_LOOKS):
        if look:
            time.sleep(_LISTEN_PAUSE_S)
        if _listens_once(pid, port):
            return True
    return False


def _listens_once(pid: int, port: int) -> bool:
    try:
        fds = os.listdir(_PROC / str(pid) / "fd")
    except OSError:
        return False
    links = []
    for fd in fds:
        # a busy server opens and closes files all the time: one closed since the listing
        # is not its listening socket (reading it as "does not listen" ignored live servers)
        with contextlib.suppress(OSError):
            links.append(os.readlink(_PROC / str(pid) / "fd" / fd))
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            rows = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != _LISTEN or fields[9] not in inodes:
                continue
            ip_hex, _, port_hex = fields[1].partition(":")
            if int(port_hex, 16) == port and _is_loopback(_address(ip_hex, family)):
                return True
    return False


def _address(ip_hex: str, family: int) -> str:
    """An address as ``/proc/net/tcp`` writes it: 32-bit words in the host's byte order."""
    words = [int(ip_hex[i : i + 8], 16) for i in range(0, len(ip_hex), 8)]
    return socket.inet_ntop(family, b"".join(struct.pack("=I", word) for word in words))
