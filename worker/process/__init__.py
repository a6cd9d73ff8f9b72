"""A worker process: a Temporal worker for ``AgentSession`` and Keel's activities.

Modules: ``assembly`` (``connect``, ``build_worker``), ``serve`` (``keel worker``: run until
signalled, drain, health), ``health``, ``telemetry`` (logs, metrics), ``interceptors`` (turn and
cycle on every activity), ``tracing`` (OpenTelemetry spans; the ``otel`` extra), ``sandbox``
(the workflow sandbox's settings), ``plugin`` (``KeelPlugin``).
"""

from worker.process.assembly import build_worker, connect
from worker.process.plugin import KeelPlugin

__all__ = ["KeelPlugin", "build_worker", "connect"]
