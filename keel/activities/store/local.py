"""The local-directory backend: the embedded default, for workers on one machine."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

# Temporary names unique to this process and call, instead of mkstemp's random ones.
_TEMP_NAMES = itertools.count()
_TEMP_ATTEMPTS = 5


class LocalBackend:
    """Objects as files under a root directory (``msg/ab/abcd...``).

    Objects are small (a message, a tool result of at most 1 MB) and written without fsync.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Use (and create on first write) a root directory."""
        self.root = Path(root)
        # Directories this process made or found: a write into one of them needs no mkdir.
        self._dirs: set[str] = set()
        self._dirs_lock = threading.Lock()

    def _path(self, key: str) -> tuple[str, str]:
        """The object's directory and file name."""
        kind, _, name = key.partition("/")
        return os.path.join(self.root, kind, name[:2]), name

    def put(self, key: str, data: bytes) -> None:
        """Write atomically (temp file, then rename); an existing object is left alone."""
        directory, name = self._path(key)
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return
        tmp, fd = self._create_temp(directory)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _create_temp(self, directory: str) -> tuple[str, int]:
        """A new temporary file in ``directory`` (made if needed), private to this user."""
        for _ in range(_TEMP_ATTEMPTS):
            if directory not in self._dirs:
                os.makedirs(directory, exist_ok=True)
                with self._dirs_lock:
                    self._dirs.add(directory)
            tmp = os.path.join(directory, f".tmp-{os.getpid()}-{next(_TEMP_NAMES)}")
            try:
                return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileNotFoundError:  # the directory was removed under us: make it again
                with self._dirs_lock:
                    self._dirs.discard(directory)
            except FileExistsError:  # left by a dead process that had this pid: next name
                continue
        raise OSError(f"cannot create a temporary file in {directory}")

    def get(self, key: str) -> bytes:
        """Read an object.

        Raises:
            KeyError: no such object.
        """
        directory, name = self._path(key)
        try:
            with open(os.path.join(directory, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise KeyError(key) from None
