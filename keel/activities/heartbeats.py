"""Activity heartbeats on the event loop's timer: no task made and cancelled per activity."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class LoopHeartbeats:
    """Calls ``beat`` every ``every_s`` seconds on the running loop's timer until stopped.

    The first call comes one interval after the start: the server counts the heartbeat
    timeout from the start, so an activity that ends within the first interval (most do)
    sends none. ``beat`` runs in a copy of the creating context (the activity's, so it may
    call ``activity.heartbeat``) and returns whether to go on.
    """

    def __init__(self, every_s: float, beat: Callable[[], bool]) -> None:
        """Schedule the first beat; call from the activity."""
        self._every_s = every_s
        self._beat = beat
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._handle: asyncio.TimerHandle = self._loop.call_later(every_s, self._tick)
        self._stopped = False

    def soon(self, delay_s: float) -> None:
        """Beat ``delay_s`` from now, unless the next beat comes sooner anyway; on the loop."""
        when = self._loop.time() + delay_s
        if self._stopped or self._handle.when() <= when:
            return
        self._handle.cancel()
        self._handle = self._loop.call_at(when, self._tick)

    def soon_threadsafe(self, delay_s: float) -> None:
        """``soon``, callable from any thread (on the loop's own, without waking it)."""
        if threading.get_ident() == self._loop_thread:
            self.soon(delay_s)
        else:
            self._loop.call_soon_threadsafe(self.soon, delay_s)

    def _tick(self) -> None:
        if self._stopped:
            return
        if self._beat():
            self._handle = self._loop.call_later(self._every_s, self._tick)

    def stop(self) -> None:
        """No more beats."""
        self._stopped = True
        self._handle.cancel()
