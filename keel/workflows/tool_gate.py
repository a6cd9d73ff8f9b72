"""The gate every tool use of the model passes: exists, not cancelled, policy, approval.

``ToolGate.resolve`` produces one tool use's result: it runs the tool (as the activity
``keel.tool.run``, or a sub-agent's child session) or says why it did not run. A tool that
needs a person's approval parks behind an interrupt the gate opens (S4); a tool that asks a
question (``ctx.interrupt``) runs again with each answer. A replay session's calls are
answered from its recording first (``keel.workflows.replaying``). A client-side tool's call is
published for a client to run (``keel.workflows.client_tools``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import ToolRequest, ToolResponse, idempotency_key
    from keel.workflows.activity_options import (
        TOOL_ACTIVITY,
        TOOL_RETRY,
        heartbeat_timeout,
        tool_start_to_close,
    )
    from keel.workflows.approvals import denial_text, needs_approval
    from keel.workflows.client_tools import ClientTools
    from keel.workflows.contracts import (
        Interrupt,
        InterruptKind,
        SessionConfig,
        ToolSpec,
        TurnRecord,
    )
    from keel.workflows.cycle import failure_text, stripped
    from keel.workflows.decisions import Decisions
    from keel.workflows.effects import EffectBook
    from keel.workflows.escalation import escalate, next_step, started
    from keel.workflows.handlers import UpdateAnswers
    from keel.workflows.judging import criteria_for, judge
    from keel.workflows.ledger import Ledger, PendingCycle
    from keel.workflows.messages import ToolResult, ToolUse, error_result
    from keel.workflows.notifications import Notifier
    from keel.workflows.replaying import Replayer
    from keel.workflows.signing import SIGNING_PATCH, SIGNING_V1, SIGNING_V2
    from keel.workflows.standing import covers
    from keel.workflows.standing_bounds import bounded, count, expired, fits
    from keel.workflows.status_attribute import tool_summary
    from keel.workflows.sub_agents import SubAgents
    from keel.workflows.tool_policies import judge_all


class ToolGate:
    """Run, refuse or park each tool use of a cycle; the tool activities in flight."""

    def __init__(
        self,
        config: SessionConfig,
        ledger: Ledger,
        notifier: Notifier,
        sub_agents: SubAgents,
        decisions: Decisions,
        show_details: Callable[[], None],
    ) -> None:
        """Gate the session's tool uses; ``show_details`` tells Temporal's UI what runs."""
        self._config = config
        self._ledger = ledger
        self._notifier = notifier
        self._sub_agents = sub_agents
        self._decisions = decisions
        self._show_details = show_details
        sub_agents.show_details = show_details  # a child's interrupts shown here change it
        # in flight in this run only: the tool activities by toolUseId (cancel stops them)
        self.tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]] = {}
        self.effects = EffectBook(config, ledger)
        self.replay = Replayer(config, ledger)
        self.client_tools = ClientTools(
            config, ledger, UpdateAnswers(ledger), self.tool_calls, show_details
        )

    async def resolve(self, record: TurnRecord, pending: PendingCycle, use: ToolUse) -> None:
        """Produce one tool use's result: run it, or say why it did not run.

        The order of gates: the tool must exist, the turn must not be cancelled, the
        session's policy must not deny it, and a human must approve it when the tool, the
        session or the policy asks for that. A tool that asks a question is run again with
        the answer, as often as it asks.
        """
        tools, cancelled = self._ledger.tools or [], self._ledger.cancel_reason
        spec = next((t for t in tools if t.name == use.name), None)
        if self.replay.active and cancelled is None:
            recorded = self.replay.answer(record, use, spec)
            if recorded is not None:  # answered from the recording, or past the divergence
                pending.results[use.toolUseId] = recorded
                return
        verdict = judge_all([self._config.policy, *self._config.policies], use)
        refusal: str | None = None
        if spec is None:
            known = ", ".join(t.name for t in tools) or "none"
            refusal = f"unknown tool {use.name!r}; this session has: {known}"
        elif cancelled is not None:
            refusal = f"tool was not run: {cancelled}"
        elif verdict.action == "deny":
            refusal = f"tool use denied by the session's policy: {verdict.reason}"
        elif (
            (needs_approval(spec, self._config) or verdict.action == "require_approval")
            and not self._stands(record, pending, use, spec)
            and (refused := await self._approval(record, use, spec, verdict.reason)).status
            != "approved"
        ):
            refusal = denial_text(refused)
        if refusal is None and use.name in self._config.agents:
            result = await self._sub_agents.run(use)
        elif refusal is None and spec is not None and spec.runs_on == "client":
            result = await self.client_tools.run(record, pending, use, spec)
        elif refusal is None:
            assert spec is not None  # an unknown tool is refused above
            result = await self._run_until_answered(record, pending, use, spec)
        else:
            result = error_result(use.toolUseId, refusal)
        pending.results[use.toolUseId] = result
        self._ledger.emit(
            "tool_finished",
            turn=record.turn_id,
            cycle=pending.cycle,
            tool=use.name,
            id=use.toolUseId,
            status=result.status,
        )

    def _stands(
        self, record: TurnRecord, pending: PendingCycle, use: ToolUse, spec: ToolSpec
    ) -> bool:
        """Whether a standing approval covers this call (never for an ``always`` tool).

        A bounded one covers it only within its bounds, and counts it
        (``keel.workflows.standing_bounds``).
        """
        approval = self._ledger.standing.get(use.name)
        if approval is None or spec.requires_approval == "always":
            return False
        if not covers(approval.when, use.input):
            return False
        ran_out = None
        if bounded(approval) and self._open_interrupt_of(use, "approval") is not None:
            # a person was asked about this very call (decided, it may be, just before a
            # continue-as-new): their decision stands, and the call is not counted as a use
            return False
        if bounded(approval):
            added = fits(approval, use.input, workflow.now())
            if added is None:
                if expired(approval, workflow.now()):
                    self._ledger.run_out(approval, "its time is up", record.turn_id)
                return False
            ran_out = count(approval, added)
        self._ledger.emit(
            "standing_approval_used",
            turn=record.turn_id,
            cycle=pending.cycle,
            tool=use.name,
            id=use.toolUseId,
            by=approval.granted_by,
        )
        if ran_out is not None:
            self._ledger.run_out(approval, ran_out, record.turn_id)
        return True

    async def _run_until_answered(
        self, record: TurnRecord, pending: PendingCycle, use: ToolUse, spec: ToolSpec
    ) -> ToolResult:
        """Run a tool; while it asks questions, wait for each answer and run it again.

        A run whose outcome is unknown (a ``write`` tool's attempt ended without a result)
        waits for a person too (``keel.workflows.effects``): approved, it runs again; resolved,
        their result stands; else the model is told it did not run again.
        """
        answers = pending.answers.setdefault(use.toolUseId, {})
        self._keep_last_answer(use, answers)
        while True:
            question = self._open_interrupt_of(use, "question")
            unknown = self.effects.unsettled(use) if question is None else None
            if question is None and unknown is None:  # nothing carried over: run the tool
                self._ledger.emit(
                    "tool_started",
                    turn=record.turn_id,
                    cycle=pending.cycle,
                    tool=use.name,
                    id=use.toolUseId,
                )
                response = await self._execute_tool(use, spec, answers)
                self.effects.noted(record.turn_id, pending.cycle, use, response)
                if response.result is not None:
                    if response.digest is None:
                        return response.result
                    # stored: the workflow keeps the reference, not the content (which
                    # histories recorded before the activity left it out still carry)
                    pending.digests[use.toolUseId] = response.digest
                    return stripped(response.result)
                if response.question is None:
                    unknown = self._open_interrupt(
                        record,
                        use,
                        kind="outcome_unknown",
                        name=use.name,
                        reason=_unknown_reason(use, response),
                    )
                else:
                    question = self._open_interrupt(
                        record,
                        use,
                        kind="question",
                        name=response.question.name,
                        reason=response.question.reason or f"tool {use.name!r} asks a question",
                    )
            if unknown is not None:
                await self._wait_for_human(unknown)
                resolved = self.effects.settle(use, unknown)
                if resolved is not None:
                    return resolved
                if unknown.status != "approved":
                    return error_result(use.toolUseId, denial_text(unknown))
                continue  # approved: run it again
            assert question is not None
            await self._wait_for_human(question)
            if question.status != "answered":
                return error_result(use.toolUseId, denial_text(question))
            answers[question.name] = question.answer

    async def _execute_tool(
        self, use: ToolUse, spec: ToolSpec, answers: dict[str, Any]
    ) -> ToolResponse:
        """The tool activity; its failure is an error result for the model, not the turn's."""
        session_id = workflow.info().workflow_id
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            ToolRequest(
                session_id=session_id,
                tool_use=use,
                idempotency_key=idempotency_key(session_id, use.toolUseId),
                timeout_s=spec.timeout_s,
                answers=answers,
                effect=self._config.tool_effects.get(use.name),
                settled_attempts=self.effects.settled_attempts(use),
            ),
            result_type=ToolResponse,
            start_to_close_timeout=tool_start_to_close(spec.timeout_s),
            heartbeat_timeout=heartbeat_timeout(self._config.heartbeat_timeout_s),
            retry_policy=TOOL_RETRY,
            summary=tool_summary(use.name),
        )
        self.tool_calls[use.toolUseId] = handle
        self._show_details()
        try:
            response: ToolResponse = await handle
            return response
        except ActivityError as err:
            if self._ledger.cancel_reason is not None:
                text = f"tool was cancelled: {self._ledger.cancel_reason}"
            else:
                text = f"tool {use.name!r} failed: {failure_text(err)}"
            return ToolResponse(result=error_result(use.toolUseId, text))
        finally:
            del self.tool_calls[use.toolUseId]
            self._show_details()

    # ----------------------------------------------------------------------------- people

    async def _approval(
        self, record: TurnRecord, use: ToolUse, spec: ToolSpec, why: str | None
    ) -> Interrupt:
        """Park the tool use behind an approval interrupt until a human decides (S4).

        An interrupt carried over from the previous run is waited on (or acted on, if it was
        decided during the switch) rather than created again. With a judge in the gate and
        criteria for the tool, the judge is asked meanwhile (``keel.workflows.judging``); a
        person who decides first cancels it.
        """
        interrupt = self._open_interrupt_of(use, "approval") or self._open_interrupt(
            record,
            use,
            kind="approval",
            name=use.name,
            reason=why or f"tool {use.name!r} requires approval",
        )
        criteria = criteria_for(self._config, spec)
        judging = None
        if criteria is not None and interrupt.status == "pending":
            judging = asyncio.create_task(judge(self._config, self._ledger, interrupt, criteria))
        try:
            await self._wait_for_human(interrupt)
        finally:
            if judging is not None and not judging.done():
                judging.cancel()  # a person decided first (or the turn ended)
        return interrupt

    async def ask(
        self, record: TurnRecord, use: ToolUse, *, kind: InterruptKind, reason: str
    ) -> Interrupt:
        """Open an interrupt of ``kind`` about ``use`` (or take the one open) and wait for it.

        For what the session itself asks a person, not a tool (a budget reached): the
        interrupt carried from the previous run, for the same ``use``, is waited on again.
        """
        interrupt = self._open_interrupt_of(use, kind) or self._open_interrupt(
            record, use, kind=kind, name=use.name, reason=reason
        )
        await self._wait_for_human(interrupt)
        return interrupt

    def _keep_last_answer(self, use: ToolUse, answers: dict[str, Any]) -> None:
        """Hold the tool's last answered question in ``answers``.

        An answer arrives in a handler; the tool's own task copies it into the pending cycle
        when it next runs. A run that continued-as-new in between (another call of the cycle
        still waiting for a person) carried the answered question but not the copy: without
        this, the tool would run without its answer and ask again.
        """
        for interrupt in reversed(self._ledger.interrupts.values()):
            if interrupt.tool_use.toolUseId == use.toolUseId and interrupt.kind == "question":
                if interrupt.status == "answered":
                    answers[interrupt.name] = interrupt.answer
                return

    def _open_interrupt_of(self, use: ToolUse, kind: str) -> Interrupt | None:
        """The latest interrupt of a kind for a tool use, unless already acted on."""
        for interrupt in reversed(self._ledger.interrupts.values()):
            if interrupt.tool_use.toolUseId == use.toolUseId and interrupt.kind == kind:
                if kind == "question" and interrupt.status == "answered":
                    return None  # its answer is in the pending cycle's answers
                return interrupt
        return None

    def _open_interrupt(
        self, record: TurnRecord, use: ToolUse, *, kind: InterruptKind, name: str, reason: str
    ) -> Interrupt:
        timeout_s = self._config.approval_timeout_s
        expires = workflow.now() + timedelta(seconds=timeout_s) if timeout_s else None
        interrupt = Interrupt(
            id=str(workflow.uuid4()),
            kind=kind,
            tool_use=use,
            name=name,
            reason=reason,
            turn=record.turn_id,
            expires_at=expires.isoformat() if expires else None,
            # what a signature covers (the tool input too, since the patch): keel.workflows.signing
            signing=SIGNING_V2 if workflow.patched(SIGNING_PATCH) else SIGNING_V1,
        )
        started(self._config, interrupt, workflow.now())
        self._ledger.open_interrupt(record, interrupt)
        self._notifier.interrupt_opened(interrupt)
        # A workflow task that only opens interrupts would complete with no command, and on
        # replay after a cache miss Temporal hands its events to the next task, with any
        # decide/respond update of that task validated first: the interrupt would look
        # unknown. A memo upsert is a command, so the task stands on its own.
        workflow.upsert_memo({"keel_interrupts_opened": len(self._ledger.interrupts)})
        self._decisions.opened(interrupt.id)
        return interrupt

    async def _wait_for_human(self, interrupt: Interrupt) -> None:
        """Wait until a pending interrupt is decided, answered, timed out or cancelled.

        One decided already shows the session's state too: the same ``KeelStatus`` upsert,
        at the same point, whether the decision came in this task's activation before this
        tool's code ran (a replay after a cache miss that merges a command-less task into
        the next) or after it waited here.
        """
        if interrupt.status != "pending":
            self._show_details()
            return
        self._show_details()
        await self._sub_agents.report_to_parent()
        ledger = self._ledger
        deadline = None
        if interrupt.expires_at is not None:
            deadline = datetime.fromisoformat(interrupt.expires_at)
        if self._config.escalate:
            await self._wait_escalating(interrupt, deadline)
        else:
            remaining = None
            if deadline is not None:
                remaining = max(deadline - workflow.now(), timedelta(milliseconds=1))
            try:
                await workflow.wait_condition(
                    lambda: interrupt.status != "pending" or ledger.cancel_reason is not None,
                    timeout=remaining,
                    timeout_summary=f"{interrupt.kind} timeout for {interrupt.tool_use.name}",
                )
            except TimeoutError:
                self._time_out(interrupt)
        if interrupt.status == "pending":  # the turn was cancelled while it waited
            ledger.close_interrupt(interrupt, "cancelled", reason=ledger.cancel_reason)
        self._show_details()
        await self._sub_agents.report_to_parent()

    def _time_out(self, interrupt: Interrupt) -> None:
        timeout_s = self._config.approval_timeout_s or 0
        self._ledger.close_interrupt(
            interrupt, "timed_out", reason=f"no decision within {timeout_s:g} s"
        )

    async def _wait_escalating(self, interrupt: Interrupt, deadline: datetime | None) -> None:
        """Wait for a person with a durable timer per escalation step, then the timeout.

        Each step comes at its time after the interrupt opened (a step already due, after a
        restart or a continue-as-new, comes at once); the approval timeout, if any, is last.
        """
        ledger = self._ledger
        while interrupt.status == "pending" and ledger.cancel_reason is None:
            coming = next_step(self._config, interrupt)
            now = workflow.now()
            if coming is not None and coming[1] <= now:
                self._escalate(interrupt)
                await self._sub_agents.report_to_parent()
                continue
            wake = deadline if coming is None else coming[1]
            what = "timeout" if coming is None else f"escalation {interrupt.escalated + 1}"
            try:
                await workflow.wait_condition(
                    lambda: interrupt.status != "pending" or ledger.cancel_reason is not None,
                    timeout=None if wake is None else max(wake - now, timedelta(milliseconds=1)),
                    timeout_summary=f"{interrupt.kind} {what} for {interrupt.tool_use.name}",
                )
            except TimeoutError:
                if coming is None:
                    self._time_out(interrupt)
                else:
                    self._escalate(interrupt)
                    await self._sub_agents.report_to_parent()

    def _escalate(self, interrupt: Interrupt) -> None:
        """Take the interrupt's next escalation step: log it, tell the notify URLs."""
        step = escalate(self._config, interrupt, workflow.now())
        self._ledger.emit(
            "interrupt_escalated",
            turn=interrupt.turn,
            id=interrupt.id,
            kind=interrupt.kind,
            step=interrupt.escalated,
            approvers=list(step.approvers),
            next_at=interrupt.next_escalation_at,
        )
        self._notifier.interrupt_escalated(interrupt, step.approvers)
        self._show_details()


def _unknown_reason(use: ToolUse, response: ToolResponse) -> str:
    """Why a person is asked about a call whose outcome is unknown."""
    report = response.effect
    tried = len(report.attempts) if report is not None else 0
    how = (report.last_ended if report is not None else None) or "an attempt ended without a result"
    reason = f"tool {use.name!r} may or may not have had its effect ({tried} attempt(s)): {how}"
    if report is not None and report.reconcile_error:
        reason += f"; its reconcile could not tell: {report.reconcile_error}"
    return reason
