"""Where a command's Temporal comes from: a configured server, or the embedded dev server.

Modules: ``connection`` (``open_connection``: connect, or embed a dev server and run a worker
in this process), ``devserver`` (the Temporal CLI's dev server, started and stopped).
"""

from worker.server.connection import TemporalConnection, TemporalUnreachable, open_connection
from worker.server.devserver import DevServer, DevServerError

__all__ = [
    "DevServer",
    "DevServerError",
    "TemporalConnection",
    "TemporalUnreachable",
    "open_connection",
]
