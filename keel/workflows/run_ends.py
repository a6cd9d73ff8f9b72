"""How a session ends outside Keel's own close, in the words the session and its readers share.

Temporal can end a session's run without asking it: ``temporal workflow terminate``,
``cancel``, a run timeout, a failed workflow. A cancelled session is told (the workflow
catches the cancellation and records it, ``AgentSession.run``); the other ends are not, so a
reader (``keel.worker.client.run_status``) asks Temporal how the run ended and says so.
Either way an unfinished turn reads ``stop_reason`` = ``session_<how>``, and the session's
``status`` is ``<how>``.
"""

from __future__ import annotations

from typing import Literal

EndedStatus = Literal["terminated", "cancelled", "timed_out", "failed"]
ENDED_STATUSES: tuple[EndedStatus, ...] = ("terminated", "cancelled", "timed_out", "failed")


def stop_reason(how: EndedStatus) -> str:
    """The ``stop_reason`` of a turn the session's end left unfinished."""
    return f"session_{how}"


ENDED_STOP_REASONS = frozenset(stop_reason(how) for how in ENDED_STATUSES)
SESSION_CANCELLED = stop_reason("cancelled")
CANCELLED_IN_TEMPORAL = "the session was cancelled in Temporal"
UNFINISHED_TURN = frozenset({"queued", "running", "awaiting_human"})
