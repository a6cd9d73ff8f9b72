"""The effects journal: what a tool call did to the world, kept where every worker sees it.

A ``write`` or ``idempotent`` tool's call is journaled in the conversation store (the local
directory, or S3 for a fleet), under the SHA-256 of its idempotency key
(``<session id>/<toolUseId>``), in objects that are written once and never changed:

- ``effect/<key>-a<N>``: attempt N is about to run the tool's body (written before the body);
- ``effect/<key>-e<N>``: how attempt N ended (returned, raised, asked, timed out, cancelled);
- ``effect/<key>-done``: the call's response, once it has a result.

So an attempt with a start and no end is one whose outcome is unknown: it began the body and
never said how it ended (its worker died, its heartbeat or Temporal's timeout ran out). And a
call with ``done`` has a result that any later run (Temporal's retry after a lost response, a
``temporal workflow reset``) answers with, without calling the tool.

Blocking I/O: call from a thread, never the event loop.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keel.activities.store.base import BlobBackend
from keel.workflows.effect_contracts import AttemptEnd, EffectAttempt

__all__ = ["EffectJournal", "JournalState", "UNKNOWN_ENDS"]

# Ends after which the effect may or may not have happened.
UNKNOWN_ENDS: frozenset[AttemptEnd | None] = frozenset({None, "timed_out", "cancelled"})
# A call is run far fewer times than this; past it the journal stops looking.
_MAX_ATTEMPTS = 1_000


@dataclass
class JournalState:
    """What the journal holds of one call.

    Attributes:
        attempts: its attempts, oldest first.
        done: its response (``ToolResponse`` as JSON), once it has a result.
    """

    attempts: list[EffectAttempt] = field(default_factory=list)
    done: dict[str, Any] | None = None

    def unsettled(self, settled: int) -> list[EffectAttempt]:
        """Attempts after the first ``settled`` whose outcome is unknown."""
        return [a for a in self.attempts if a.attempt > settled and a.ended in UNKNOWN_ENDS]


class EffectJournal:
    """One tool call's journal in a store's backend."""

    def __init__(self, backend: BlobBackend, idempotency_key: str) -> None:
        """Journal the call with this idempotency key."""
        self._backend = backend
        self._base = "effect/" + hashlib.sha256(idempotency_key.encode()).hexdigest()

    def read(self) -> JournalState:
        """Everything journaled of the call so far."""
        state = JournalState(done=self._get(f"{self._base}-done"))
        for number in range(1, _MAX_ATTEMPTS + 1):
            started = self._get(f"{self._base}-a{number}")
            if started is None:
                break
            attempt = EffectAttempt.model_validate(started)
            ended = self._get(f"{self._base}-e{number}")
            if ended is not None:
                attempt = attempt.model_copy(update=ended)
            state.attempts.append(attempt)
        return state

    def start(self, number: int, worker: str) -> EffectAttempt:
        """Record that attempt ``number`` is about to run the tool's body."""
        attempt = EffectAttempt(attempt=number, started_at=_now(), worker=worker)
        self._put(f"{self._base}-a{number}", attempt.model_dump(mode="json"))
        return attempt

    def end(self, attempt: EffectAttempt, how: AttemptEnd) -> EffectAttempt:
        """Record how an attempt ended."""
        ended = {"ended": how, "ended_at": _now()}
        self._put(f"{self._base}-e{attempt.attempt}", ended)
        return attempt.model_copy(update=ended)

    def finish(self, response: dict[str, Any]) -> None:
        """Record the call's response: later runs answer with it."""
        self._put(f"{self._base}-done", response)

    def _get(self, key: str) -> Any:
        try:
            data = self._backend.get(key)
        except KeyError:
            return None
        return json.loads(data)

    def _put(self, key: str, value: Any) -> None:
        self._backend.put(key, json.dumps(value, sort_keys=True).encode())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
