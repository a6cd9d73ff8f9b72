"""``run_agent``: one agent turn as a child ``AgentSession`` of any workflow.

Inside a workflow (yours, on a worker that has ``KeelPlugin``, or Keel's own for
sub-agents), ``await run_agent(prompt, config=SessionConfig(...))`` starts a child session
that runs one turn and closes; the child is a whole session (its own history, approvals,
``keel show CHILD``), and its id is given or derived from the parent's.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow

from keel.workflows.contracts import KeelModel, SessionConfig, SessionResult, TurnStatus
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import ContentBlock, Message, TokenUsage, text_block
from keel.workflows.status_attribute import child_attributes

# The child's workflow type: started by name, so this module does not import the session.
SESSION_WORKFLOW = "AgentSession"


class AgentResult(KeelModel):
    """What ``run_agent`` returns: the child session's one turn.

    Attributes:
        session_id: the child session's id (its workflow id).
        status: completed, failed or cancelled.
        stop_reason: the model's last stop reason.
        message: the turn's last assistant message.
        output: the structured output, with an ``output_schema``; else None.
        usage: tokens used (its own sub-agents' included).
        error: why the turn failed, if it did.
        cost_usd: what the turn cost in US dollars: the known part, None while none is
            (``keel.workflows.cost``).
        cost_unknown: some of its cost is unknown: ``cost_usd`` leaves it out.
    """

    session_id: str
    status: TurnStatus
    stop_reason: str | None = None
    message: Message | None = None
    output: Any = None
    usage: TokenUsage = TokenUsage()
    error: str | None = None
    cost_usd: float | None = None
    cost_unknown: bool = False


def child_session_id(parent_id: str, key: str) -> str:
    """The id of a child session: the parent's id and a key unique within the parent."""
    return f"{parent_id}/{key}"


async def run_agent(
    prompt: str | Sequence[ContentBlock],
    *,
    config: SessionConfig,
    session_id: str | None = None,
    task_queue: str | None = None,
    execution_timeout: timedelta | None = None,
) -> AgentResult:
    """Run one agent turn in a child ``AgentSession`` and return its result.

    Call it from workflow code. Approvals the turn needs wait in the child session, decided
    on it like on any session (``keel approve CHILD ID``, ``KeelClient.decide``).

    Args:
        prompt: text, or user content blocks.
        config: the child session's configuration.
        session_id: the child's id; default ``<this workflow's id>/agent-<uuid>`` (the uuid
            from ``workflow.uuid4``, so the same on replay).
        task_queue: where the child runs; default this workflow's task queue.
        execution_timeout: a bound on the child's whole run.
    """
    content = [text_block(prompt)] if isinstance(prompt, str) else list(prompt)
    child_id = session_id or child_session_id(
        workflow.info().workflow_id, f"agent-{workflow.uuid4().hex[:12]}"
    )
    result = await workflow.execute_child_workflow(
        SESSION_WORKFLOW,
        SessionInput(config=config, prompt=content, single_turn=True),
        id=child_id,
        task_queue=task_queue,
        execution_timeout=execution_timeout,
        result_type=SessionResult,
        search_attributes=child_attributes(),
    )
    return agent_result(child_id, result)


def agent_result(child_id: str, result: SessionResult) -> AgentResult:
    """The ``AgentResult`` of a closed single-turn session."""
    turn = result.last_turn
    if turn is None:
        return AgentResult(session_id=child_id, status="failed", error="the agent ran no turn")
    return AgentResult(
        session_id=child_id,
        status=turn.status,
        stop_reason=turn.stop_reason,
        message=turn.message,
        output=turn.output,
        usage=turn.usage,
        error=turn.error,
        cost_usd=turn.cost_usd,
        cost_unknown=turn.cost_unknown,
    )
