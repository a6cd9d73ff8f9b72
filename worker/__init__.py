"""Process wiring: the client API, the worker process, the ``keel`` CLI, a Temporal server.

Public surface::

    from worker import KeelClient, connect          # talk to sessions
    from worker import TextChunk                    # what KeelClient.model_text yields
    from worker import build_worker, Settings       # run a worker in your own process
    from worker import KeelPlugin                   # Keel inside your own Temporal app
    from worker import RequestRejected, SessionNotFound, SessionClosed, NoWorker
    from worker import load_agent_file, AgentFile, AgentFileError  # agent files
    from worker import KeelSchedules, ScheduleNotFound  # jobs on a schedule

Rooms, one concern each:

- ``worker.client``: ``KeelClient`` and the errors it raises (the Python API);
- ``worker.process``: a worker process: assembly, serving, health, telemetry, tracing,
  interceptors, the workflow sandbox;
- ``worker.cli``: the ``keel`` command;
- ``worker.server``: where a command's Temporal comes from: a configured server or the
  embedded dev server;
- ``worker.settings``, ``worker.payloads`` (the data converter) and ``worker.shell`` (the
  commands printed for a person to copy, and the session id rule), shared by all of them.
"""

from worker.client import (
    AgentFile,
    AgentFileError,
    KeelClient,
    KeelSchedules,
    NoWorker,
    RequestRejected,
    ScheduleNotFound,
    SessionClosed,
    SessionNotFound,
    TextChunk,
    WorkerWait,
    load_agent_file,
)
from worker.process import KeelPlugin, build_worker, connect
from worker.settings import Settings

__all__ = [
    "AgentFile",
    "AgentFileError",
    "KeelClient",
    "KeelPlugin",
    "KeelSchedules",
    "NoWorker",
    "RequestRejected",
    "ScheduleNotFound",
    "SessionClosed",
    "SessionNotFound",
    "Settings",
    "TextChunk",
    "WorkerWait",
    "build_worker",
    "connect",
    "load_agent_file",
]
