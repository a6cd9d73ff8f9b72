"""A progress bar on stderr: ``keel deploy check``'s, and ``keel eval``'s."""

from __future__ import annotations

import time
from typing import IO

_BAR_WIDTH = 30
_REDRAW_S = 0.1


class ProgressBar:
    """``LABEL [#####-----] 12/40``, redrawn in place at most 10 times a second."""

    def __init__(self, stream: IO[str], label: str) -> None:
        """Draw on ``stream``, the bar after ``label`` (``checking``, ``evaluating``)."""
        self.stream = stream
        self.label = label
        self.drawn = 0.0
        self.last: tuple[int, int] | None = None

    def show(self, done: int, total: int) -> None:
        """Draw ``done`` of ``total`` (at once at the end; else at most every 0.1 s)."""
        self.last = (done, total)
        now = time.monotonic()
        if done < total and now - self.drawn < _REDRAW_S:
            return
        self.drawn = now
        filled = _BAR_WIDTH * done // total if total else _BAR_WIDTH
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line, if it drew one."""
        if self.last is not None:
            self.stream.write("\n")
            self.stream.flush()
