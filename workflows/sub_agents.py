"""Sub-agents: tools that run one turn of a child ``AgentSession``.

A session whose configuration names ``agents`` offers each to its model as a tool of that
name taking ``{"prompt": string}``. A call starts a child session (id ``<parent id>/<name>-
<toolUseId>``, so a retried call finds the same child) that runs one turn and closes; its
final text, or its structured output as JSON, is the tool result.

The child's interrupts surface in the parent: the child signals them (``child_interrupts``),
the parent shows copies in its own turn (``interrupts``, ``pending``), and a decision or an
answer given to the parent is forwarded to the child as a ``decide`` / ``respond`` signal,
where the child checks it again. Cancelling the parent's turn cancels the child.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import TypeAdapter
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from workflows.agents import SESSION_WORKFLOW, agent_result, child_session_id
    from workflows.contracts import (
        Answer,
        ChildInterrupts,
        Decision,
        Interrupt,
        SessionConfig,
        SessionResult,
        SubAgent,
        ToolSpec,
    )
    from workflows.cycle import text_of
    from workflows.handlers import SessionHandlers
    from workflows.ledger import SessionInput
    from workflows.messages import ToolResult, ToolResultContent, ToolUse, error_result, text_block
    from workflows.notifications import SessionNotifier

CHILD_INTERRUPTS_SIGNAL = "child_interrupts"
_JSON: TypeAdapter[Any] = TypeAdapter(Any)
PROMPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "what the sub-agent should do"}},
    "required": ["prompt"],
}


def sub_agent_specs(agents: dict[str, SubAgent]) -> list[ToolSpec]:
    """The tool specs a parent's model sees for its sub-agents."""
    return [
        ToolSpec(name=name, description=agent.description, inputSchema=PROMPT_SCHEMA)
        for name, agent in agents.items()
    ]


class SubAgentSessions(SessionHandlers, SessionNotifier):
    """The parent's side (run a child, mirror its interrupts) and the child's (report)."""

    _config: SessionConfig
    # in flight in this run only: child session id -> sub-agent name, and decisions or
    # answers given here for a child's interrupt, not yet forwarded
    _children: dict[str, str]
    _forward: list[tuple[str, Decision | Answer]]

    async def _run_sub_agent(self, turn_id: int, use: ToolUse) -> ToolResult:
        """Run one turn of the sub-agent ``use.name`` in a child session; its result."""
        agent = self._config.agents[use.name]
        prompt = use.input.get("prompt") if isinstance(use.input, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return error_result(use.toolUseId, 'a sub-agent takes {"prompt": "<text>"}')
        parent = workflow.info().workflow_id
        child_id = child_session_id(parent, f"{use.name}-{use.toolUseId}")
        self._children[child_id] = use.name
        child = asyncio.create_task(
            workflow.execute_child_workflow(
                SESSION_WORKFLOW,
                SessionInput(
                    config=agent.config,
                    prompt=[text_block(prompt)],
                    single_turn=True,
                    parent_session=parent,
                ),
                id=child_id,
                result_type=SessionResult,
            )
        )
        try:
            while True:
                await workflow.wait_condition(
                    lambda: (
                        child.done()
                        or self._ledger.cancel_reason is not None
                        or any(c == child_id for c, _ in self._forward)
                    )
                )
                await self._forward_to(child_id)
                if child.done():
                    break
                if self._ledger.cancel_reason is not None:
                    child.cancel()
                    break
            result = await child
        except (ChildWorkflowError, asyncio.CancelledError) as err:
            why = self._ledger.cancel_reason or str(getattr(err, "cause", None) or err)
            return error_result(use.toolUseId, f"sub-agent {use.name!r} did not finish: {why}")
        finally:
            del self._children[child_id]
            self._close_mirrors(child_id)
        outcome = agent_result(child_id, result)
        if outcome.status != "completed":
            text = f"sub-agent {use.name!r} {outcome.status}: {outcome.error or 'no answer'}"
            return error_result(use.toolUseId, text)
        if outcome.output is not None:
            answer = _JSON.dump_json(outcome.output).decode()
        else:
            answer = text_of(outcome.message)
        return ToolResult(
            toolUseId=use.toolUseId, content=[ToolResultContent(text=answer or "(no text)")]
        )

    async def _forward_to(self, child_id: str) -> None:
        """Send the child the decisions and answers given here for its interrupts."""
        mine = [(c, m) for c, m in self._forward if c == child_id]
        self._forward = [(c, m) for c, m in self._forward if c != child_id]
        handle = workflow.get_external_workflow_handle(child_id)
        for _, message in mine:
            name = "decide" if isinstance(message, Decision) else "respond"
            await handle.signal(name, message)

    def _close_mirrors(self, child_id: str) -> None:
        """The child is over: its interrupts still shown here are no longer pending."""
        for interrupt_id, owner in list(self._ledger.mirrored.items()):
            if owner != child_id:
                continue
            interrupt = self._ledger.interrupts.get(interrupt_id)
            if interrupt is not None and interrupt.status == "pending":
                self._ledger.close_interrupt(interrupt, "cancelled", reason="sub-agent ended")
            del self._ledger.mirrored[interrupt_id]

    @workflow.signal(name=CHILD_INTERRUPTS_SIGNAL)
    def child_interrupts(self, input: ChildInterrupts) -> None:
        """A running child's interrupts: show new pending ones here, settle decided ones."""
        ledger, name = self._ledger, self._children.get(input.child_id)
        record = ledger.current
        if name is None or record is None:
            workflow.logger.warning(
                "ignored interrupts of %r: not a running sub-agent", input.child_id
            )
            return
        opened = False
        for theirs in input.interrupts:
            mine = ledger.interrupts.get(theirs.id)
            if mine is None and theirs.status == "pending":
                ledger.mirrored[theirs.id] = input.child_id
                copy = theirs.model_copy(
                    update={"turn": record.turn_id, "reason": f"[sub-agent {name}] {theirs.reason}"}
                )
                ledger.open_interrupt(record, copy)
                self._notify_interrupt(copy)  # the parent's URLs: it is decided here
                opened = True
            elif (
                mine is not None
                and mine.status == "pending"
                and theirs.status != "pending"
                and ledger.mirrored.get(mine.id) == input.child_id
            ):
                ledger.close_interrupt(
                    mine, theirs.status, theirs.decided_by, theirs.decision_reason
                )
        if opened:  # a command, so the task that opens them stands alone (see _open_interrupt)
            workflow.upsert_memo({"keel_interrupts_opened": len(ledger.interrupts)})

    def _apply_decision(self, interrupt: Interrupt, decision: Decision) -> None:
        super()._apply_decision(interrupt, decision)
        child = self._ledger.mirrored.get(interrupt.id)
        if child is not None:
            self._forward.append((child, decision))

    def _apply_answer(self, interrupt: Interrupt, answer: Answer) -> None:
        super()._apply_answer(interrupt, answer)
        child = self._ledger.mirrored.get(interrupt.id)
        if child is not None:
            self._forward.append((child, answer))

    async def _report_to_parent(self) -> None:
        """A sub-agent's session: tell the parent about this session's interrupts."""
        parent = self._ledger.parent_session
        if parent is None:
            return
        report = ChildInterrupts(
            child_id=workflow.info().workflow_id, interrupts=list(self._ledger.interrupts.values())
        )
        await workflow.get_external_workflow_handle(parent).signal(CHILD_INTERRUPTS_SIGNAL, report)
