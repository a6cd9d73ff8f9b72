"""Process wiring: settings, the Temporal client and worker, the embedded dev server, the CLI.

Public surface::

    from worker import connect, build_worker, KeelClient, Settings
"""

from worker.assembly import build_worker, connect
from worker.sessions import (
    KeelClient,
    NoWorker,
    RequestRejected,
    SessionClosed,
    SessionNotFound,
    WorkerWait,
)
from worker.settings import Settings

__all__ = [
    "KeelClient",
    "NoWorker",
    "RequestRejected",
    "SessionClosed",
    "SessionNotFound",
    "Settings",
    "WorkerWait",
    "build_worker",
    "connect",
]
