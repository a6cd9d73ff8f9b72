"""A worker process: a Temporal worker for ``AgentSession`` and Keel's activities.

Modules: ``assembly`` (``connect``, ``build_worker``), ``serve`` (``keel worker``: run until
signalled, drain, health), ``health``, ``telemetry`` (logs, metrics), ``interceptors`` (turn and
cycle on every activity), ``tracing`` (OpenTelemetry spans; the ``otel`` extra), ``sandbox``
(the workflow sandbox's settings), ``plugin`` (``KeelPlugin``), ``stream_server`` (the stream
endpoint), ``version_routing`` (whether a versioned worker's version is current).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
