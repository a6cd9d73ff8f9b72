"""Deterministic workflow code: the session workflow, the message model, the agent loop.

Imports only the standard library, temporalio, pydantic and its own modules.
"""

from workflows.contracts import (
    PromptAck,
    PromptInput,
    SessionConfig,
    SessionInput,
    SessionState,
    StateQuery,
    TurnRecord,
)
from workflows.messages import ContentBlock, Message
from workflows.session import AgentSession

__all__ = [
    "AgentSession",
    "ContentBlock",
    "Message",
    "PromptAck",
    "PromptInput",
    "SessionConfig",
    "SessionInput",
    "SessionState",
    "StateQuery",
    "TurnRecord",
]
