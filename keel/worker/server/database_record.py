"""Which ``temporal.db`` Keel made for a ``KEEL_HOME``: a cloned folder cannot ship its own.

The embedded dev server keeps its sessions in ``KEEL_HOME/temporal.db``. A database is more
than data: its histories hold scheduled tool calls and decisions, and a worker that starts on
it (``keel dev``, ``keel run``, ``keel approve``) runs what they hold with the user's tools.
A cloned repository that shipped ``.keel/temporal.db`` would have its sessions' tool calls
run on the user's machine. So when a ``DevServer`` has made (or been told to adopt) a
database, it records the file's identity (device and inode) among ``KEEL_HOME``'s records in
the user's state directory (``keel.worker.server.records``); it starts on an existing
database only when that record names it.
"""

from __future__ import annotations

import os
from pathlib import Path

from keel.worker.server.records import read_private, records_dir, write_private

RECORD_FILE = "database.json"
"""Among a ``KEEL_HOME``'s records: the identity of the database Keel made for it."""

ADOPT_FLAG = "--adopt-database"


class UntrustedDatabase(Exception):
    """A ``temporal.db`` Keel did not make for this ``KEEL_HOME`` here (the CLI exits 2)."""


def database_record_path(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> Path:
    """Where the identity of ``home``'s database is recorded."""
    return records_dir(home, state_home) / RECORD_FILE


def check_database(
    database: Path, home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None
) -> None:
    """Refuse an existing ``database`` that is not the one recorded for ``home``.

    Raises:
        UntrustedDatabase: naming the file, why it is refused and how to adopt it.
    """
    if not (database.exists() or database.is_symlink()):
        return
    recorded = read_private(database_record_path(home, state_home), home)
    info = database.lstat()
    if (
        recorded is not None
        and not database.is_symlink()
        and recorded.get("device") == info.st_dev
        and recorded.get("inode") == info.st_ino
    ):
        return
    raise UntrustedDatabase(
        f"{database} was not made by Keel for this folder on this machine (a cloned repository "
        "could ship one whose sessions would run your tools), so no Temporal is started on it: "
        f"move it away, or, if it is yours (copied, or made by an older Keel), run "
        f"`keel dev {ADOPT_FLAG}` once in this folder"
    )


def remember_database(
    database: Path, home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None
) -> None:
    """Record ``database`` (a regular file, now there) as the one Keel made for ``home``.

    Raises:
        OSError: it cannot be recorded.
    """
    info = database.lstat()
    record = {"database": str(database), "device": info.st_dev, "inode": info.st_ino}
    write_private(database_record_path(home, state_home), home, record)
