"""Decisions and answers (S4): what the ``decide`` and ``respond`` handlers do.

One path for both, as update (validated, answered) and as signal (fire-and-forget: an
invalid one is logged and ignored). A decision or answer names a pending interrupt the
session created and is checked by ``keel.workflows.approvals`` (approvers, signatures bound
to this session or an ancestor, its namespace, and the tool and input shown); a sub-agent's
interrupt shown here is handed to the sub-agent's session and counts once that session
accepted it (``keel.workflows.sub_agents``).
"""

from __future__ import annotations

from collections import deque

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keel.workflows import limits
    from keel.workflows.approvals import check_answer, check_decision, signer_fingerprint
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import (
        Answer,
        Decision,
        Interrupt,
        InterruptAck,
        InterruptStatus,
        RevokeAck,
        RevokeInput,
        SessionConfig,
        StandingApproval,
    )
    from keel.workflows.handlers import UpdateAnswers, expect
    from keel.workflows.interrupt_kinds import decision_refusal, kind_of
    from keel.workflows.ledger import Ledger
    from keel.workflows.standing import check_standing, covers
    from keel.workflows.standing_bounds import bounded, count, fits, granted
    from keel.workflows.sub_agents import SubAgents

# decide/respond signals a workflow task keeps for interrupts it may yet open, newest first
HELD_SIGNALS_KEPT = 16
Message = Decision | Answer


class Decisions:
    """Check and apply decisions and answers; hold early signals for one workflow task."""

    def __init__(
        self, config: SessionConfig, ledger: Ledger, answers: UpdateAnswers, sub_agents: SubAgents
    ) -> None:
        """Decide the interrupts of ``ledger`` under the rules of ``config``."""
        self._config = config
        self._ledger = ledger
        self._answers = answers
        self._sub_agents = sub_agents
        # decide/respond signals naming an interrupt not open yet, with the history length of
        # the workflow task they came in (see ``_hold``); never carried to another run
        self._held: deque[tuple[int, Message]] = deque(maxlen=HELD_SIGNALS_KEPT)

    def _pending_for(self, message: Message) -> Interrupt:
        """The pending interrupt ``message`` decides or answers, or why it is refused."""
        info = workflow.info()
        signed_for = (info.workflow_id, *self._ledger.ancestors)
        interrupts, config, namespace = self._ledger.interrupts, self._config, info.namespace
        if isinstance(message, Decision):
            interrupt = check_decision(interrupts, message, config, signed_for, namespace)
            refused = decision_refusal(interrupt, message)
            if refused is not None:
                raise InputRejected(refused)
            tools = self._ledger.tools or []
            check_standing(message, next((t for t in tools if t.name == interrupt.name), None))
        else:
            interrupt = check_answer(interrupts, message, config, signed_for, namespace)
        if interrupt.id in self._sub_agents.handing_on:
            raise InputRejected(
                f"interrupt {interrupt.id!r} is being decided in its sub-agent's session"
            )
        return interrupt

    def check(self, message: Message, kind: type[Message]) -> None:
        """The ``decide`` / ``respond`` update validator."""
        expect(message, kind)
        if self._answers.given(InterruptAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        self._within_limits(message)
        self._pending_for(message)

    def _within_limits(self, message: Message) -> None:
        """Refuse a decision or answer over a size limit (``keel.workflows.limits``).

        Only where it is checked, never in a handler: a history that accepted it before the
        limits replays as it ran.
        """
        if isinstance(message, Decision):
            limits.check_decision(message)
            if message.always and message.decision == "approve":
                interrupt = self._ledger.interrupts.get(message.interrupt_id)
                tool = None if interrupt is None else interrupt.tool_use.name
                standing = self._ledger.standing
                limits.check_standing_count(len(standing), tool in standing)
        else:
            limits.check_answer(message)

    def _within_limits_since_patch(self, message: Message) -> None:
        """A signal's ``_within_limits``: signals from before the limits count as sent.

        The patch is asked only for a signal over a limit, so a history records its marker
        only where the answer matters.
        """
        try:
            self._within_limits(message)
        except InputRejected:
            if workflow.patched(limits.LIMITS_PATCH):
                raise

    async def take(self, message: Message) -> InterruptAck:
        """The ``decide`` / ``respond`` update: decide, or hand on to a sub-agent's session.

        The same update id again (a redelivery) gets the same answer and acts no second time.
        """
        again = self._answers.given(InterruptAck)
        if again is not None:
            return again
        interrupt = self._pending_for(message)
        child = self._sub_agents.deciding(interrupt)
        if child is not None:
            return self._answers.give(await self._sub_agents.hand_on(child, interrupt, message))
        self._apply(interrupt, message)
        return self._answers.give(_ack(interrupt))

    def take_signal(self, message: Message, kind: type[Message]) -> None:
        """The ``decide`` / ``respond`` signal: the same checks; an invalid one is logged."""
        try:
            expect(message, kind)
            self._within_limits_since_patch(message)
            interrupt = self._pending_for(message)
        except InputRejected as err:
            held = self._hold(message)
            workflow.logger.warning("ignored %s signal: %s%s", _name(kind), err, held)
            return
        child = self._sub_agents.deciding(interrupt)
        if child is not None:
            self._sub_agents.hand_on_later(child, interrupt, message)
            return
        self._apply(interrupt, message)

    def _apply(self, interrupt: Interrupt, message: Message) -> None:
        if isinstance(message, Decision):
            status: InterruptStatus = _STATUS[message.decision]
            key = signer_fingerprint(self._config, message.approver)
            if message.decision == "resolve":
                interrupt.answer = message.result  # the tool's result, as the person recorded it
            elif message.extend is not None:
                interrupt.answer = message.extend  # a budget's grant (keel.workflows.budgets)
            self._ledger.close_interrupt(interrupt, status, message.approver, message.reason, key)
            if message.always and status == "approved" and kind_of(interrupt).standing:
                approval = StandingApproval(
                    tool=interrupt.tool_use.name,
                    when=message.always_when,
                    granted_by=message.approver,
                    key_fingerprint=key,
                    interrupt_id=interrupt.id,
                    turn=interrupt.turn,
                )
                granted(approval, message, workflow.now())
                self._ledger.grant(approval)
                self._approve_waiting(approval, key)
        else:
            interrupt.answer = message.value
            key = signer_fingerprint(self._config, message.responder)
            self._ledger.close_interrupt(interrupt, "answered", message.responder, key=key)
        self._sub_agents.forward_later(interrupt, message)  # sessions from before the patch

    def _approve_waiting(self, approval: StandingApproval, key: str | None) -> None:
        """Other calls of the tool that wait now and pass its tests are approved with it.

        Within its bounds: each counts as a use, in the order they opened; past a bound the
        rest keep waiting for a person.
        """
        for waiting in self._ledger.pending_interrupts():
            if (
                kind_of(waiting).standing
                and waiting.tool_use.name == approval.tool
                and waiting.id not in self._ledger.mirrored
                and covers(approval.when, waiting.tool_use.input)
            ):
                ran_out = None
                if bounded(approval):
                    if self._ledger.standing.get(approval.tool) is not approval:
                        return  # it ran out on an earlier one
                    added = fits(approval, waiting.tool_use.input, workflow.now())
                    if added is None:
                        continue  # its amount does not fit what is left of the total
                    ran_out = count(approval, added)
                why = f"standing approval from interrupt {approval.interrupt_id}"
                self._ledger.close_interrupt(waiting, "approved", approval.granted_by, why, key)
                if ran_out is not None:
                    self._ledger.run_out(approval, ran_out, waiting.turn)

    def check_revoke(self, input: RevokeInput) -> None:
        """The ``revoke`` update validator."""
        expect(input, RevokeInput)
        limits.check_revoke(input)
        if self._answers.given(RevokeAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        if input.tool not in self._ledger.standing:
            standing = ", ".join(sorted(self._ledger.standing)) or "none"
            raise InputRejected(
                f"tool {input.tool!r} has no standing approval here; standing: {standing}"
            )
        if self._config.approvers and input.by not in self._config.approvers:
            raise InputRejected(f"{input.by!r} is not an approver of this session")

    def revoke(self, input: RevokeInput) -> RevokeAck:
        """End a tool's standing approval: its next call asks a person again."""
        again = self._answers.given(RevokeAck)
        if again is not None:
            return again
        return self._answers.give(RevokeAck(revoked=self._ledger.revoke(input.tool, input.by)))

    def _hold(self, message: object) -> str:
        """Keep a decide/respond signal whose interrupt is not open, for this workflow task.

        A query can show an interrupt before the workflow task that opens it has run, and a
        signal sent then is handled in that task, before the interrupt opens. Such a signal
        is kept, and applied if an interrupt of that id opens in the same task; never later,
        so a signal cannot decide an interrupt ahead of time.

        Returns:
            What to add to the log line: why the signal may still count, or nothing.
        """
        if not isinstance(message, Decision | Answer):
            return ""
        if message.interrupt_id in self._ledger.interrupts:
            return ""  # known: refused for another reason
        self._held.append((workflow.info().get_current_history_length(), message))
        return " (unless that interrupt opens in this workflow task)"

    def opened(self, interrupt_id: str) -> None:
        """An interrupt just opened: handle the signal held for it in this task, if one is.

        It is taken out of the hold and handled again as a signal: the same checks. Signals
        held in an earlier task are void and dropped; this task's others stay.
        """
        task = workflow.info().get_current_history_length()
        current = [(at, s) for at, s in self._held if at == task]
        held = next((s for _, s in current if s.interrupt_id == interrupt_id), None)
        self._held = deque(
            ((at, s) for at, s in current if s is not held), maxlen=self._held.maxlen
        )
        if held is None:
            return
        workflow.logger.info("applying a signal sent as interrupt %s opened", interrupt_id)
        self.take_signal(held, type(held))


_STATUS: dict[str, InterruptStatus] = {
    "approve": "approved",
    "deny": "denied",
    "resolve": "resolved",
}


def _name(kind: type[Message]) -> str:
    return "decide" if kind is Decision else "respond"


def _ack(interrupt: Interrupt) -> InterruptAck:
    return InterruptAck(interrupt_id=interrupt.id, turn_id=interrupt.turn, status=interrupt.status)
