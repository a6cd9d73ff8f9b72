"""Streamed model text for watchers: the whole text of each model-call attempt, in memory.

The model activity appends every text delta to a ``TextStream``; the worker's stream endpoint
(``keel.worker.process.stream_server``) serves it to readers from any offset, so a reader that
connects late, or reconnects, still gets every character in order. Nothing here touches
Temporal: the activity advertises a stream (its URL and a random token) in its heartbeat
details, which live in the activity's pending state on the server, never in workflow history.

A stream is kept ``RETAIN_S`` seconds after its attempt ends, for readers still catching up.
"""

from __future__ import annotations

import bisect
import secrets
import threading
import time
from dataclasses import dataclass

# How long a finished stream stays readable, for readers still catching up or late.
RETAIN_S = 60.0


@dataclass(frozen=True)
class StreamAdvert:
    """Where a reader finds a stream: what the heartbeat details carry.

    Attributes:
        url: ``http://host:port/streams/<id>``.
        token: the bearer token the endpoint asks for (random, per attempt).
    """

    url: str
    token: str

    def details(self) -> dict[str, str]:
        """The advert as heartbeat details carry it."""
        return {"url": self.url, "token": self.token}


class TextStream:
    """The text one model-call attempt streams, whole; thread-safe, readable from any offset."""

    def __init__(self, stream_id: str, token: str) -> None:
        """An open stream with no text yet."""
        self.id = stream_id
        self.token = token
        self._cond = threading.Condition()
        self._parts: list[str] = []
        self._ends: list[int] = []  # _ends[i]: characters up to the end of _parts[i]
        self.status: str | None = None  # None while open; then "completed" or "failed"
        self.closed_at: float | None = None

    @property
    def chars(self) -> int:
        """Characters streamed so far."""
        with self._cond:
            return self._ends[-1] if self._ends else 0

    def append(self, delta: str) -> None:
        """Add a text delta and wake the readers."""
        if not delta:
            return
        with self._cond:
            if self.status is not None:
                return  # a provider thread still running after the attempt ended
            self._parts.append(delta)
            self._ends.append((self._ends[-1] if self._ends else 0) + len(delta))
            self._cond.notify_all()

    def close(self, status: str) -> None:
        """End the stream (``completed`` or ``failed``) and wake the readers."""
        with self._cond:
            if self.status is None:
                self.status = status
                self.closed_at = time.monotonic()
                self._cond.notify_all()

    def read(self, offset: int, timeout_s: float) -> tuple[str, str | None]:
        """The text after ``offset``, waiting up to ``timeout_s`` for some.

        Returns:
            The new text (possibly empty) and the stream's status (None while it is open).
        """
        with self._cond:
            self._cond.wait_for(
                lambda: (self._ends and self._ends[-1] > offset) or self.status is not None,
                timeout_s,
            )
            return self._text_after(offset), self.status

    def _text_after(self, offset: int) -> str:
        if not self._ends or offset >= self._ends[-1]:
            return ""
        first = bisect.bisect_right(self._ends, offset)
        start = self._ends[first - 1] if first else 0
        return "".join(self._parts[first:])[offset - start :]


class TextStreams:
    """The open (and recently ended) streams of one worker process, by id."""

    def __init__(self, base_url: str) -> None:
        """Streams whose adverts point at ``base_url`` (``http://host:port``)."""
        self.base_url = base_url.rstrip("/")
        self._lock = threading.Lock()
        self._streams: dict[str, TextStream] = {}

    def open(self) -> tuple[TextStream, StreamAdvert]:
        """A new stream, and its advert for the heartbeat details."""
        stream = TextStream(secrets.token_hex(12), secrets.token_urlsafe(24))
        with self._lock:
            self._sweep()
            self._streams[stream.id] = stream
        return stream, StreamAdvert(f"{self.base_url}/streams/{stream.id}", stream.token)

    def get(self, stream_id: str) -> TextStream | None:
        """The stream of that id, unless it is unknown or ended more than ``RETAIN_S`` ago."""
        with self._lock:
            self._sweep()
            return self._streams.get(stream_id)

    def __len__(self) -> int:
        """Streams held (open, or ended within ``RETAIN_S``)."""
        with self._lock:
            return len(self._streams)

    def _sweep(self) -> None:
        now = time.monotonic()
        gone = [
            key
            for key, s in self._streams.items()
            if s.closed_at is not None and now - s.closed_at > RETAIN_S
        ]
        for key in gone:
            del self._streams[key]


__all__ = ["RETAIN_S", "StreamAdvert", "TextStream", "TextStreams"]
