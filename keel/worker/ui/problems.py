"""What went wrong, for a person: each failure of a request as an HTTP status and a sentence."""

from __future__ import annotations

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from keel.activities.store import EncryptionKeyError, StoreError
from keel.worker.client.errors import NoWorker, RequestRejected, SessionClosed, SessionNotFound
from keel.worker.ui.source import unreachable


def problem(err: BaseException) -> tuple[int, str] | None:
    """``(HTTP status, message)`` for a failure a person should read; None for a bug.

    A banner shows the message; the status is what a script sees.
    """
    down = unreachable(err)
    if down is not None:
        return 503, f"Temporal is unreachable: {down}. This page tries again."
    if isinstance(err, SessionClosed):
        return 409, f"Nothing was changed: {err}."
    if isinstance(err, RequestRejected):
        return 409, f"Nothing was changed: {err}. The page now shows the session as it is."
    if isinstance(err, SessionNotFound):
        return 404, f"{err}."
    if isinstance(err, NoWorker):
        return 503, f"{err}; start one with `keel worker` (or `keel dev`)."
    if isinstance(err, EncryptionKeyError | StoreError):
        return 500, f"cannot read the session: {err}"
    if isinstance(err, WorkflowQueryFailedError):
        return 500, f"the session's worker failed to answer: {err.message}"
    if isinstance(err, RPCError):
        status = err.status.name if err.status is not None else "an error"
        return 502, f"Temporal answered {status}: {err.message}"
    return None
