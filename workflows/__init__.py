"""Deterministic workflow code: the session workflow, the message model, the agent loop.

Imports only the standard library, temporalio, pydantic and its own modules. Public surface::

    from workflows import AgentSession, SessionConfig, SessionInput    # the workflow
    from workflows import Message, ContentBlock, ToolUse, ToolResult    # Converse messages
    from workflows import tool_policy, Verdict                          # tool policies
    from workflows import run_agent, AgentResult                        # agents in your workflow

The modules behind it are internal: ``session`` (the loop), ``handlers`` (updates, signals,
queries), ``ledger`` (the state), ``contracts`` and ``activity_contracts`` (typed inputs and
outputs), ``boundary`` and ``approvals`` (security checks), ``cycle``, ``activity_options``.
"""

from workflows.agents import AgentResult, run_agent
from workflows.approvals import UnknownInterrupt
from workflows.boundary import InputRejected
from workflows.contracts import (
    Answer,
    CancelAck,
    CancelInput,
    CloseInput,
    Decision,
    Event,
    InferenceConfig,
    Interrupt,
    InterruptAck,
    PendingView,
    PromptAck,
    PromptInput,
    SessionConfig,
    SessionResult,
    SessionState,
    StateQuery,
    SteerAck,
    SteerInput,
    SubAgent,
    TurnRecord,
)
from workflows.ledger import SessionInput
from workflows.messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Message,
    TokenUsage,
    ToolResult,
    ToolResultContent,
    ToolUse,
    text_block,
)
from workflows.session import AgentSession
from workflows.tool_policies import Verdict, tool_policy

__all__ = [
    "AgentResult",
    "AgentSession",
    "Answer",
    "CancelAck",
    "CancelInput",
    "CloseInput",
    "ContentBlock",
    "Decision",
    "DocumentBlock",
    "Event",
    "ImageBlock",
    "InferenceConfig",
    "InputRejected",
    "Interrupt",
    "InterruptAck",
    "Message",
    "PendingView",
    "PromptAck",
    "PromptInput",
    "SessionConfig",
    "SessionInput",
    "SessionResult",
    "SessionState",
    "StateQuery",
    "SteerAck",
    "SteerInput",
    "SubAgent",
    "TokenUsage",
    "ToolResult",
    "ToolResultContent",
    "ToolUse",
    "TurnRecord",
    "UnknownInterrupt",
    "Verdict",
    "run_agent",
    "text_block",
    "tool_policy",
]
