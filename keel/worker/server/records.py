"""Records that commands trust, kept where a cloned folder cannot plant them.

``keel dev`` records the server it runs for a folder, and ``keel run --tools FILE`` the tool
files it was given; later commands on the same ``KEEL_HOME`` follow these records. A record
inside the folder (``.keel/server.json``) could come with a cloned repository, and point
every command at another server or run its own code. So they live in the user's state
directory, ``$XDG_STATE_HOME/keel/homes/<digest>/`` (default ``~/.local/state``), one
directory per ``KEEL_HOME`` named by a digest of its real path. Directories are made 0700
and files 0600; a record is read only when the user owns it and each directory up to
``keel/``, and nobody else can write any of them. A record that fails is ignored with a
one-line warning. One found in the old place, the folder itself, is never read: a warning
says so once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

STATE_DIR = "keel"
"""In the user's state directory: Keel's records."""

_HOMES = "homes"
_warned: set[str] = set()


class RecordError(OSError):
    """A record cannot be written where it must be (a directory someone else owns)."""


def state_root(state_home: str | os.PathLike[str] | None) -> Path:
    """``keel/`` in the user's state directory (``Settings.state_home``; read when None)."""
    if state_home is None:
        from keel.worker.settings import Settings

        state_home = Settings.from_env().state_home
    assert state_home is not None
    return Path(state_home) / STATE_DIR


def real_home(home: str | os.PathLike[str]) -> str:
    """The real path of a ``KEEL_HOME``, links resolved: what its records are keyed by."""
    return os.path.realpath(home)


def records_dir(
    home: str | os.PathLike[str], state_home: str | os.PathLike[str] | None = None
) -> Path:
    """The directory of ``home``'s records: ``keel/homes/<sha256 of its real path>``."""
    digest = hashlib.sha256(real_home(home).encode("utf-8", "surrogateescape")).hexdigest()
    return state_root(state_home) / _HOMES / digest[:32]


def warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning, one line, once per process for ``key``."""
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(message, *args)


def ignore_old(home: str | os.PathLike[str], name: str, place: Path) -> None:
    """Warn once when ``home`` holds ``name`` (the old place of a record): it is not read."""
    old = Path(home) / name
    if old.is_file() or old.is_symlink():
        warn_once(
            f"old:{old}",
            "ignoring %s: records in a working folder are never trusted (a cloned repository "
            "could plant one); Keel keeps them in %s",
            old,
            place,
        )


def _untrusted(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` cannot be trusted, or None: not the user's, writable by others, a link."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if directory != stat.S_ISDIR(info.st_mode) or not (directory or stat.S_ISREG(info.st_mode)):
        return f"{path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid != os.getuid():
        return f"{path} belongs to user {info.st_uid}, not to you ({os.getuid()})"
    if info.st_mode & 0o022:
        return f"{path} can be written by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _chain(path: Path) -> list[Path]:
    """The directories from ``keel/`` down to ``path``'s folder: each must be trusted."""
    folder, root = path.parent, path.parent.parent.parent
    return [root, root / _HOMES, folder]


def read_private(path: Path, home: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A record of ``home``, when it is there and trusted; else None (a warning if not trusted).

    Besides the owner and mode checks, the record must name ``home``'s real path.
    """
    try:
        problem = next(
            (p for d in _chain(path) if (p := _untrusted(d, directory=True))), None
        ) or _untrusted(path, directory=False)
    except FileNotFoundError:
        return None
    except OSError as err:
        problem = str(err)
    if problem is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd) as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            data, problem = None, f"unreadable ({err})"
        if problem is None and not (isinstance(data, dict) and data.get("home") == real_home(home)):
            problem = f"it is not a record of {real_home(home)}"
    if problem is not None:
        warn_once(f"bad:{path}", "ignoring the record %s: %s", path, problem)
        return None
    return dict(data)


def write_private(path: Path, home: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write a record of ``home`` (its real path added), 0600, in directories made 0700.

    Raises:
        RecordError: a directory on the way is not the user's alone.
    """
    for directory in _chain(path):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700, parents=True)
        problem = _untrusted(directory, directory=True)
        if problem is not None:
            raise RecordError(f"cannot keep Keel's records in {directory}: {problem}")
    body = json.dumps({**data, "home": real_home(home)}, indent=1, sort_keys=True) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(temporary, path)


def remove(path: Path) -> None:
    """Remove a record, if it is there."""
    with contextlib.suppress(OSError):
        path.unlink()
