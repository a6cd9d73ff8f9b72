"""What goes wrong when talking to sessions and schedules: every error the client API raises.

The one module that defines them; everything else (the client, the CLI, the web page, the
public face ``keel``) imports them from here. ``Pollers`` and ``WorkerWait`` are here too:
they describe the missing worker that ``NoWorker`` and the wait notices report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keel.workflows.ledger import SessionInput


@dataclass(frozen=True)
class Pollers:
    """What Temporal says of the workers polling a task queue for workflow tasks.

    Attributes:
        task_queue: the task queue.
        known: whether Temporal said (describing a task queue may be forbidden, or fail).
        last_poll_s: seconds since a worker last polled; None when none has for minutes
            (Temporal forgets a poller 5 minutes after its last poll).
    """

    task_queue: str
    known: bool
    last_poll_s: float | None

    @property
    def none(self) -> bool:
        """Whether Temporal knows of no worker on the task queue."""
        return self.known and self.last_poll_s is None

    def __str__(self) -> str:
        """What is known of the workers, as a phrase."""
        queue = repr(self.task_queue)
        if not self.known:
            return f"no worker on task queue {queue} answers"
        if self.last_poll_s is None:
            return f"no worker is polling task queue {queue}"
        return f"no worker on task queue {queue} answers (last poll {self.last_poll_s:.0f} s ago)"


class RequestRejected(Exception):
    """The session refused a request (a validator said no); nothing was written.

    Attributes:
        kind: the type of the session's error, e.g. ``"UnknownInterrupt"`` or
            ``"InputRejected"``: what a caller can act on without reading the message.
    """

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        """The reason, as the session gave it, and its type."""
        super().__init__(message)
        self.kind = kind


class SessionNotFound(Exception):
    """No session with that id exists."""


class SessionClosed(RequestRejected):
    """The session's workflow has ended: it takes no more prompts, decisions or guidance."""


class SessionNeverRan(SessionClosed):
    """Temporal ended the session's run before any worker ran it: no worker can answer it.

    Its run timeout passed while no worker took it, or it was terminated first
    (``keel.worker.client.never_ran``); the readings of ``KeelClient`` answer from ``start``.

    Attributes:
        session_id: the session.
        start: the input the run was started with.
    """

    def __init__(self, session_id: str, start: SessionInput) -> None:
        """Say which session never ran."""
        self.session_id = session_id
        self.start = start
        super().__init__(
            f"session {session_id!r} ended in Temporal before any worker ran it: no worker "
            "can answer it"
        )


class NoWorker(Exception):
    """A request to a session needs a worker on the session's task queue, and none answered.

    Attributes:
        session_id: the session.
        workers: what Temporal says of the workers on the session's task queue.
    """

    def __init__(self, session_id: str, workers: Pollers, detail: str | None = None) -> None:
        """Describe the missing worker; ``detail`` is what Temporal said, if it said anything."""
        self.session_id = session_id
        self.workers = workers
        said = f" (Temporal: {detail})" if detail else ""
        super().__init__(f"{workers}, so session {session_id!r} cannot answer{said}")


@dataclass(frozen=True)
class WorkerWait:
    """A request to a session has had no worker's answer for a while (a notice, not an error).

    Attributes:
        session_id: the session.
        waited_s: seconds since the request was sent.
        workers: what Temporal says of the workers on the session's task queue.
        failing: why the session's workflow task keeps failing, when it does (a worker
            with another encryption key, say); None otherwise.
    """

    session_id: str
    waited_s: float
    workers: Pollers
    failing: str | None = None

    def __str__(self) -> str:
        """One line for a person."""
        if self.failing is not None:
            return (
                f"session {self.session_id!r} is not progressing ({self.waited_s:.0f} s so far): "
                f"its workflow task keeps failing on the worker: {self.failing}"
            )
        return (
            f"waiting for a worker on task queue {self.workers.task_queue!r} "
            f"({self.waited_s:.0f} s so far; {self.workers})"
        )


class ScheduleNotFound(Exception):
    """No schedule with that name exists."""


class AgentFileError(ValueError):
    """An agent file that cannot be used: ``FILE:LINE: key: what is wrong``."""
