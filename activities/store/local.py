"""The local-directory backend: the embedded default, for workers on one machine."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class LocalBackend:
    """Objects as files under a root directory (``msg/ab/abcd...``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Use (and create on first write) a root directory."""
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        kind, _, name = key.partition("/")
        return self.root / kind / name[:2] / name

    def put(self, key: str, data: bytes) -> None:
        """Write atomically (temp file, then rename); an existing object is left alone."""
        path = self._path(key)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        """Read an object.

        Raises:
            KeyError: no such object.
        """
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None
