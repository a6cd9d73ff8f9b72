"""The Python API for clients: ``KeelClient`` and the errors it raises.

Modules: ``keel_client`` (``KeelClient``: what changes a session), ``reading`` (what reads one
without writing history: state, events, the model's stream, listings), ``streams`` (every
character a model streams, from the worker's stream endpoint), ``calls`` (how a call to a
session fails: Temporal's errors as Keel's), ``paths`` (a user's paths, made sendable),
``agent_files`` (agent files), ``schedules`` (``KeelSchedules``: jobs on a Temporal Schedule).
"""

from worker.client.agent_files import AgentFile, AgentFileError, SubAgentFile, load_agent_file
from worker.client.calls import (
    NoWorker,
    RequestRejected,
    SessionClosed,
    SessionNotFound,
    WorkerWait,
)
from worker.client.keel_client import KeelClient
from worker.client.reading import ModelStream, SessionSummary
from worker.client.schedules import KeelSchedules, ScheduleNotFound, ScheduleSummary
from worker.client.streams import TextChunk

__all__ = [
    "AgentFile",
    "AgentFileError",
    "KeelClient",
    "KeelSchedules",
    "ModelStream",
    "NoWorker",
    "RequestRejected",
    "ScheduleNotFound",
    "ScheduleSummary",
    "SessionClosed",
    "SessionNotFound",
    "SessionSummary",
    "SubAgentFile",
    "TextChunk",
    "WorkerWait",
    "load_agent_file",
]
