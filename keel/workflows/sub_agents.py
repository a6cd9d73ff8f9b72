"""Sub-agents: tools that run one turn of a child ``AgentSession``.

A session whose configuration names ``agents`` offers each to its model as a tool of that
name taking ``{"prompt": string}``. A call starts a child session (id ``<parent id>/<name>-
<toolUseId>``, so a retried call finds the same child) that runs one turn and closes; its
final text, or its structured output as JSON, is the tool result.

The child runs with its parent's rules for who may decide and its judge rule, narrowed and
never widened by its own (``keel.workflows.inheritance``), so a decision sent straight to the
child is checked as the parent would check it; of the parent's standing approvals it gets
only those granted by approvers it kept. Its interrupts surface in the parent: the child signals
``child_interrupts``, which the parent takes only as a hint (a signal has no sender anyone
can check): it asks its child through the activity ``keel.session.child_report``, which
answers only for a session that Temporal says this very run of the parent started, and
shows copies of what the child holds in its own turn (``interrupts``, ``pending``). A
decision or an answer given to the parent is handed to the child as a ``decide`` /
``respond`` update (``keel.session.forward``); it counts in the parent only once the child
accepted it (the child checks it again: a signature bound to the parent verifies there, as
the parent is among the child's ``ancestors``). Cancelling the parent's turn cancels the
child.

A child spends its parent's budget: it starts with caps no larger than what the parent's
turn has left, and what it spent counts in the parent's totals, listed apart too
(``keel.workflows.child_budgets``).

Sessions that started their first sub-agent before this (no ``CHILD_TRUST_PATCH`` marker in
their history) keep the earlier way, the signal's list believed and decisions signalled,
so that their histories replay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import (
        ChildReportRequest,
        ForwardRequest,
        ForwardResponse,
    )
    from keel.workflows.activity_options import (
        CHILD_REPORT_ACTIVITY,
        FORWARD_ACTIVITY,
        SESSION_CALL_RETRY,
        SESSION_CALL_START_TO_CLOSE,
    )
    from keel.workflows.agents import (
        SESSION_WORKFLOW,
        AgentResult,
        agent_result,
        child_session_id,
    )
    from keel.workflows.approvals import signer_fingerprint
    from keel.workflows.boundary import InputRejected
    from keel.workflows.child_budgets import CHILD_SPEND_PATCH, bounded, child_spend, left
    from keel.workflows.contracts import (
        Answer,
        ChildInterrupts,
        Decision,
        Interrupt,
        InterruptAck,
        InterruptStatus,
        SessionConfig,
        SessionResult,
        SubAgent,
        ToolSpec,
    )
    from keel.workflows.cycle import text_of
    from keel.workflows.inheritance import child_config, inherited_standing
    from keel.workflows.ledger import Ledger, SessionInput
    from keel.workflows.messages import (
        ToolResult,
        ToolResultContent,
        ToolUse,
        error_result,
        text_block,
    )
    from keel.workflows.notifications import Notifier
    from keel.workflows.status_attribute import child_attributes, short

CHILD_INTERRUPTS_SIGNAL = "child_interrupts"
# Sub-agents are trusted only as far as their parent can check (see the module's docstring).
CHILD_TRUST_PATCH = "keel-child-trust"
# The error type of a decision or answer that a sub-agent's session refused (the same type
# as any rejected input: clients treat it alike).
REFUSED_BY_CHILD = "KeelInputRejected"
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


class SubAgents:
    """A session's sub-agents: its children (run, asked, decided through) and its parent."""

    def __init__(self, config: SessionConfig, ledger: Ledger, notifier: Notifier) -> None:
        """Run the sub-agents of ``config``; record what they show in ``ledger``."""
        self._config = config
        self._ledger = ledger
        self._notifier = notifier
        # in flight in this run only (no run continues-as-new while a child runs): child
        # session id -> sub-agent name; children that said their interrupts changed, not
        # asked yet; interrupts whose decision is being handed to their child; and (sessions
        # from before CHILD_TRUST_PATCH) decisions given here, not yet signalled to a child
        self.children: dict[str, str] = {}
        self._report_due: set[str] = set()
        self.handing_on: set[str] = set()
        self._forward: list[tuple[str, Decision | Answer]] = []
        # tells Temporal's UI (current details, KeelStatus) when the mirrors change; the
        # session's, wired by the tool gate
        self.show_details: Callable[[], None] = lambda: None

    def _asks_children(self) -> bool:
        """Whether this run checks its children (True but when replaying an older history)."""
        return workflow.patched(CHILD_TRUST_PATCH)

    async def run(self, use: ToolUse) -> ToolResult:
        """Run one turn of the sub-agent ``use.name`` in a child session; its result."""
        agent = self._config.agents[use.name]
        prompt = use.input.get("prompt") if isinstance(use.input, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return error_result(use.toolUseId, 'a sub-agent takes {"prompt": "<text>"}')
        asks = self._asks_children()
        config = agent.config
        if asks:
            try:
                config = child_config(self._config, agent.config, use.name)
            except InputRejected as err:
                return error_result(use.toolUseId, f"sub-agent not started: {err}")
        record = self._ledger.current
        spends = record is not None and workflow.patched(CHILD_SPEND_PATCH)
        if spends and record is not None:  # the child spends the parent's budget
            budget = left(self._config, self._ledger, record)
            spent = budget.spent()
            if spent is not None:
                return error_result(use.toolUseId, f"sub-agent not started: the parent's {spent}")
            config = bounded(config, self._config, budget)
        parent = workflow.info().workflow_id
        child_id = child_session_id(parent, f"{use.name}-{use.toolUseId}")
        self.children[child_id] = use.name
        child = asyncio.create_task(
            workflow.execute_child_workflow(
                SESSION_WORKFLOW,
                SessionInput(
                    config=config,
                    prompt=[text_block(prompt)],
                    single_turn=True,
                    parent_session=parent,
                    ancestors=[parent, *self._ledger.ancestors] if asks else [],
                    standing=(
                        inherited_standing(config, list(self._ledger.standing.values()))
                        if asks
                        else []
                    ),
                ),
                id=child_id,
                result_type=SessionResult,
                search_attributes=child_attributes(),
                static_summary=short(f"sub-agent {use.name}"),
            )
        )
        result: SessionResult | None = None
        try:
            result = await self._follow(child_id, child)
        except (ChildWorkflowError, asyncio.CancelledError) as err:
            if isinstance(err, asyncio.CancelledError) and self._ledger.cancel_reason is None:
                raise  # not the turn's cancel: the session itself is cancelled in Temporal
            why = self._ledger.cancel_reason or str(getattr(err, "cause", None) or err)
            return error_result(use.toolUseId, f"sub-agent {use.name!r} did not finish: {why}")
        finally:
            del self.children[child_id]
            self._report_due.discard(child_id)
            self._close_mirrors(child_id)
            if spends and record is not None:
                self._ledger.add_sub_agent(record, use.name, child_spend(result))
        return _tool_result(use, agent_result(child_id, result))

    async def _follow(self, child_id: str, child: asyncio.Task[SessionResult]) -> SessionResult:
        """Wait for the child, asking it when it says its interrupts changed."""
        while True:
            await workflow.wait_condition(
                lambda: (
                    child.done()
                    or self._ledger.cancel_reason is not None
                    or child_id in self._report_due
                    or any(c == child_id for c, _ in self._forward)
                )
            )
            if child_id in self._report_due:
                await self._ask_child(child_id)
                continue
            await self._forward_to(child_id)
            if child.done():
                break
            if self._ledger.cancel_reason is not None:
                child.cancel()
                break
        return await child

    async def _ask_child(self, child_id: str) -> None:
        """Show here what the child holds, as its session answers for itself.

        ``keel.session.child_report`` answers only for a session that this run started
        (Temporal records a child's parent; no client can set it).
        """
        self._report_due.discard(child_id)
        info = workflow.info()
        try:
            report = await workflow.execute_activity(
                CHILD_REPORT_ACTIVITY,
                ChildReportRequest(
                    parent_id=info.workflow_id, parent_run_id=info.run_id, child_id=child_id
                ),
                result_type=ChildInterrupts,
                start_to_close_timeout=SESSION_CALL_START_TO_CLOSE,
                retry_policy=SESSION_CALL_RETRY,
                summary=short(f"ask sub-agent {self.children.get(child_id, child_id)}"),
            )
        except ActivityError as err:
            workflow.logger.warning(
                "could not ask sub-agent session %s for its interrupts: %s",
                child_id,
                err.cause or err,
            )
            return
        self._mirror(child_id, report.interrupts)

    def deciding(self, interrupt: Interrupt) -> str | None:
        """The child session that decides this interrupt, when it is a checked mirror."""
        child = self._ledger.mirrored.get(interrupt.id)
        if child is None or not self._asks_children():
            return None
        return child

    async def hand_on(
        self, child_id: str, interrupt: Interrupt, message: Decision | Answer
    ) -> InterruptAck:
        """Hand a decision or answer given here to the child; it counts once it took it.

        Raises:
            ApplicationError: the child refused it (or cannot be reached); the interrupt
                stays pending here, its ``note`` saying why.
        """
        self.handing_on.add(interrupt.id)
        try:
            response = await workflow.execute_activity(
                FORWARD_ACTIVITY,
                ForwardRequest(
                    child_id=child_id,
                    decision=message if isinstance(message, Decision) else None,
                    answer=message if isinstance(message, Answer) else None,
                ),
                result_type=ForwardResponse,
                start_to_close_timeout=SESSION_CALL_START_TO_CLOSE,
                retry_policy=SESSION_CALL_RETRY,
                summary=short(
                    f"forward {interrupt.kind} {interrupt.name} to sub-agent "
                    f"{self.children.get(child_id, child_id)}"
                ),
            )
        except ActivityError as err:
            response = ForwardResponse(refused=f"it cannot be reached: {err.cause or err}")
        finally:
            self.handing_on.discard(interrupt.id)
        if response.ack is None:
            interrupt.note = f"the sub-agent's session refused it: {response.refused}"
            workflow.logger.warning("interrupt %s: %s", interrupt.id, interrupt.note)
            raise ApplicationError(interrupt.note, type=REFUSED_BY_CHILD, non_retryable=True)
        interrupt.note = None
        if interrupt.status == "pending":
            self._settle_mirror(interrupt, response.ack.status, message)
        return InterruptAck(
            interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status
        )

    def hand_on_later(
        self, child_id: str, interrupt: Interrupt, message: Decision | Answer
    ) -> None:
        """``hand_on`` for a signal: in a task of its own; a refusal is logged."""

        async def hand_on() -> None:
            try:
                await self.hand_on(child_id, interrupt, message)
            except ApplicationError:
                pass  # logged, and noted on the interrupt

        asyncio.create_task(hand_on())

    def forward_later(self, interrupt: Interrupt, message: Decision | Answer) -> None:
        """Sessions from before CHILD_TRUST_PATCH: signal a mirror's decision to its child."""
        child = self._ledger.mirrored.get(interrupt.id)
        if child is not None:
            self._forward.append((child, message))

    def _settle_mirror(
        self, interrupt: Interrupt, status: InterruptStatus, message: Decision | Answer
    ) -> None:
        """Close a mirror the child accepted a decision or answer for, as the child did."""
        if isinstance(message, Decision):
            who, reason = message.approver, message.reason
        else:
            who, reason = message.responder, None
            interrupt.answer = message.value
        key = signer_fingerprint(self._config, who)
        self._ledger.close_interrupt(interrupt, status, who, reason, key)
        self.show_details()

    async def _forward_to(self, child_id: str) -> None:
        """Sessions from before CHILD_TRUST_PATCH: signal the child what was decided here."""
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
        self.show_details()

    def hint(self, input: ChildInterrupts) -> None:
        """A running child says its interrupts changed (signal ``child_interrupts``).

        The parent asks the child; from a session that is not a running child of this one,
        the hint is logged and dropped.
        """
        if not isinstance(input, ChildInterrupts) or input.child_id not in self.children:
            child = getattr(input, "child_id", None)
            workflow.logger.warning("ignored interrupts of %r: not a running sub-agent", child)
            return
        if self._asks_children():
            self._report_due.add(input.child_id)
            return
        self._mirror(input.child_id, input.interrupts)

    def _mirror(self, child_id: str, interrupts: list[Interrupt]) -> None:
        """Show a child's new pending interrupts here; settle those it has decided."""
        ledger, name = self._ledger, self.children.get(child_id)
        record = ledger.current
        if name is None or record is None:
            return
        opened = False
        for theirs in interrupts:
            mine = ledger.interrupts.get(theirs.id)
            if mine is None and theirs.status == "pending":
                ledger.mirrored[theirs.id] = child_id
                copy = theirs.model_copy(
                    update={"turn": record.turn_id, "reason": f"[sub-agent {name}] {theirs.reason}"}
                )
                ledger.open_interrupt(record, copy)
                self._notifier.interrupt_opened(copy)  # the parent's URLs: decided here
                opened = True
            elif (
                mine is not None
                and mine.status == "pending"
                and theirs.status != "pending"
                and ledger.mirrored.get(mine.id) == child_id
            ):
                mine.answer = theirs.answer
                ledger.close_interrupt(
                    mine,
                    theirs.status,
                    theirs.decided_by,
                    theirs.decision_reason,
                    theirs.key_fingerprint,
                )
        if opened:  # a command, so the task that opens them stands alone (see the session)
            workflow.upsert_memo({"keel_interrupts_opened": len(ledger.interrupts)})
        self.show_details()

    def report(self) -> ChildInterrupts:
        """Every interrupt of this session: what its parent asks for (query ``interrupts``)."""
        return ChildInterrupts(
            child_id=workflow.info().workflow_id, interrupts=list(self._ledger.interrupts.values())
        )

    async def report_to_parent(self) -> None:
        """A sub-agent's session: tell the parent that this session's interrupts changed."""
        parent = self._ledger.parent_session
        if parent is None:
            return
        await workflow.get_external_workflow_handle(parent).signal(
            CHILD_INTERRUPTS_SIGNAL, self.report()
        )


def _tool_result(use: ToolUse, outcome: AgentResult) -> ToolResult:
    """The parent's tool result of a sub-agent's turn."""
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
