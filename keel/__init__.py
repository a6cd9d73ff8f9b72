"""Keel: durable LLM agents on Temporal.

Everything a user needs is here, under one installed name::

    from keel import KeelClient, connect, RequestRejected         # talk to sessions
    from keel import KeelPlugin, run_agent, SessionConfig         # Keel in your Temporal app
    from keel import tool, ToolContext, tool_policy, Verdict      # tools and policies
    from keel import judge, JudgeRequest, JudgeVerdict            # a judge in the gate
    from keel import Interrupt, Decision, Answer, TurnRecord       # what sessions hold

The packages behind it (``keel.workflows``, ``keel.activities``, ``keel.worker``) are
internal. Names are imported when first used, so ``import keel`` is cheap, and workflow code
(inside Temporal's sandbox) may import ``run_agent`` and the session types from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_WHERE = {
    # the workflow and its types (deterministic code: safe to import in workflows)
    "AgentSession": "keel.workflows.session",
    "AgentResult": "keel.workflows.agents",
    "run_agent": "keel.workflows.agents",
    "Answer": "keel.workflows.contracts",
    "Decision": "keel.workflows.contracts",
    "Event": "keel.workflows.contracts",
    "InferenceConfig": "keel.workflows.contracts",
    "Interrupt": "keel.workflows.contracts",
    "InterruptAck": "keel.workflows.contracts",
    "PendingView": "keel.workflows.contracts",
    "SessionConfig": "keel.workflows.contracts",
    "SessionState": "keel.workflows.contracts",
    "SubAgent": "keel.workflows.contracts",
    "TurnRecord": "keel.workflows.contracts",
    "ContentBlock": "keel.workflows.messages",
    "Message": "keel.workflows.messages",
    "TokenUsage": "keel.workflows.messages",
    "ToolResult": "keel.workflows.messages",
    "ToolUse": "keel.workflows.messages",
    "text_block": "keel.workflows.messages",
    "InputRejected": "keel.workflows.boundary",
    "JudgeRequest": "keel.workflows.activity_contracts",
    "JudgeVerdict": "keel.workflows.activity_contracts",
    "Verdict": "keel.workflows.tool_policies",
    "tool_policy": "keel.workflows.tool_policies",
    # tools and storage
    "tool": "keel.activities.tools",
    "judge": "keel.activities.function_judges",
    "ToolContext": "keel.activities.tools",
    "ConversationStore": "keel.activities.store",
    "open_store": "keel.activities.store",
    # clients, workers
    "KeelClient": "keel.worker.client.keel_client",
    "RequestRejected": "keel.worker.client.errors",
    "SessionNotFound": "keel.worker.client.errors",
    "SessionClosed": "keel.worker.client.errors",
    "NoWorker": "keel.worker.client.errors",
    "TextChunk": "keel.worker.client.streams",
    "connect": "keel.worker.process.assembly",
    "KeelPlugin": "keel.worker.process.plugin",
    "Settings": "keel.worker.settings",
    "load_agent_file": "keel.worker.client.agent_files",
    "AgentFileError": "keel.worker.client.errors",
    "KeelSchedules": "keel.worker.client.schedules",
    "ScheduleNotFound": "keel.worker.client.errors",
}

__all__ = [
    "AgentFileError",
    "AgentResult",
    "AgentSession",
    "Answer",
    "ContentBlock",
    "ConversationStore",
    "Decision",
    "Event",
    "InferenceConfig",
    "InputRejected",
    "Interrupt",
    "InterruptAck",
    "JudgeRequest",
    "JudgeVerdict",
    "KeelClient",
    "KeelPlugin",
    "KeelSchedules",
    "Message",
    "NoWorker",
    "PendingView",
    "RequestRejected",
    "ScheduleNotFound",
    "SessionClosed",
    "SessionConfig",
    "SessionNotFound",
    "SessionState",
    "Settings",
    "SubAgent",
    "TextChunk",
    "TokenUsage",
    "ToolContext",
    "ToolResult",
    "ToolUse",
    "TurnRecord",
    "Verdict",
    "connect",
    "judge",
    "load_agent_file",
    "open_store",
    "run_agent",
    "text_block",
    "tool",
    "tool_policy",
]


def __getattr__(name: str) -> Any:
    """Import a public name from the module that defines it, on first use."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'keel' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]


if TYPE_CHECKING:
    from keel.activities.function_judges import judge
    from keel.activities.store import ConversationStore, open_store
    from keel.activities.tools import ToolContext, tool
    from keel.worker.client.agent_files import load_agent_file
    from keel.worker.client.errors import (
        AgentFileError,
        NoWorker,
        RequestRejected,
        ScheduleNotFound,
        SessionClosed,
        SessionNotFound,
    )
    from keel.worker.client.keel_client import KeelClient
    from keel.worker.client.schedules import KeelSchedules
    from keel.worker.client.streams import TextChunk
    from keel.worker.process.assembly import connect
    from keel.worker.process.plugin import KeelPlugin
    from keel.worker.settings import Settings
    from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict
    from keel.workflows.agents import AgentResult, run_agent
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import (
        Answer,
        Decision,
        Event,
        InferenceConfig,
        Interrupt,
        InterruptAck,
        PendingView,
        SessionConfig,
        SessionState,
        SubAgent,
        TurnRecord,
    )
    from keel.workflows.messages import (
        ContentBlock,
        Message,
        TokenUsage,
        ToolResult,
        ToolUse,
        text_block,
    )
    from keel.workflows.session import AgentSession
    from keel.workflows.tool_policies import Verdict, tool_policy
