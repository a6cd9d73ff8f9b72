"""What a person decides, through the Python API: approvals, answers, standing approvals.

``SessionDecider`` is a ``SessionReader`` that sends the validated ``decide`` and ``respond``
updates (signed when the session has approver keys), records the result of a tool whose
outcome is unknown (``resolve``) and revokes standing approvals; ``KeelClient`` is one, by
inheritance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from temporalio.workflow import UpdateMethodMultiParam

from keel.worker.client.calls import settling
from keel.worker.client.reading import SessionReader
from keel.worker.signing import ApproverKey
from keel.workflows.approvals import UnknownInterrupt
from keel.workflows.budget_contracts import BudgetAck, BudgetInput
from keel.workflows.contracts import (
    Answer,
    Condition,
    Decision,
    InterruptAck,
    RevokeAck,
    RevokeInput,
    StandingApproval,
)
from keel.workflows.session import AgentSession
from keel.workflows.standing import signed_value

P = TypeVar("P")


class SessionDecider(SessionReader):
    """Answers what a session asks a person: approvals, questions, standing approvals."""

    async def decide(
        self,
        session_id: str,
        interrupt_id: str,
        decision: Literal["approve", "deny"],
        *,
        reason: str | None = None,
        approver: str | None = None,
        key: ApproverKey | None = None,
        always: bool = False,
        always_when: Sequence[Condition] = (),
        extend: float | None = None,
        max_uses: int | None = None,
        for_s: float | None = None,
        total: Condition | None = None,
    ) -> InterruptAck:
        """Approve or deny a pending interrupt (the validated ``decide`` update).

        Args:
            session_id: the session.
            interrupt_id: the pending interrupt (see ``pending``).
            decision: ``approve`` or ``deny``.
            reason: why; the model sees it when denied.
            approver: who decides; checked against the session's approvers.
            key: the approver's private key, to sign with (sessions with approver keys).
            always: approve this call and stand for the tool's later calls in the session
                (a standing approval; see ``policy`` and ``revoke``).
            always_when: tests a later call's input must pass to be covered
                (``keel.workflows.standing.parse_conditions`` reads them from text).
            extend: approving a ``budget`` interrupt, grant this much more of the cap
                reached (model calls, tokens or dollars) instead of its allowance once more.
            max_uses: with ``always``: how many later calls it covers at most.
            for_s: with ``always``: for how many seconds from now it stands.
            total: with ``always``: a running total over a numeric field of the covered
                calls' inputs, ``amount <= 100`` (``Condition(field="amount", op="<=",
                value=100)``); a call whose amount does not fit what is left asks.

        Raises:
            RequestRejected: the id is unknown or no longer pending, the approver is not
                allowed, the signature is missing or wrong, or bounds are given without
                ``always``; nothing was written to the session's history.
        """
        update = Decision(
            interrupt_id=interrupt_id,
            decision=decision,
            reason=reason,
            approver=approver,
            always=always,
            always_when=list(always_when),
            extend=extend,
            max_uses=max_uses,
            for_s=for_s,
            total=total,
        )
        return await self._send_decision(session_id, update, key)

    async def resolve(
        self,
        session_id: str,
        interrupt_id: str,
        result: str,
        *,
        reason: str | None = None,
        approver: str | None = None,
        key: ApproverKey | None = None,
    ) -> InterruptAck:
        """Record the result of a tool whose outcome is unknown, without running it again.

        An ``outcome_unknown`` interrupt opens when an attempt of a ``write`` tool ended
        without a result (its worker died, say): the tool may or may not have had its effect.
        A person who knows what happened records the result here (the model reads it as the
        tool's result); ``decide`` with ``approve`` runs the tool again instead, ``deny``
        gives the model an error. The signature (sessions with approver keys) covers the
        result: a signature for one result cannot record another.

        Args:
            session_id: the session.
            interrupt_id: the pending ``outcome_unknown`` interrupt (see ``pending``).
            result: the tool's result, as text (at most 64,000 bytes).
            reason: why; kept with the decision.
            approver: who decides; checked against the session's approvers.
            key: the approver's private key, to sign with (sessions with approver keys).

        Raises:
            RequestRejected: the id is unknown or no longer pending, the interrupt is not of
                kind ``outcome_unknown``, the result is too long, the approver is not allowed,
                or the signature is missing or wrong; nothing was written to the session's
                history.
        """
        update = Decision(
            interrupt_id=interrupt_id,
            decision="resolve",
            reason=reason,
            approver=approver,
            result=result,
        )
        return await self._send_decision(session_id, update, key)

    async def _send_decision(
        self, session_id: str, update: Decision, key: ApproverKey | None
    ) -> InterruptAck:
        """The ``decide`` update, signed over ``signed_value`` when there is a key."""
        what = signed_value(update)

        async def sign() -> None:
            update.signature = await self._signature(
                key,
                session_id,
                update.interrupt_id,
                "decide",
                what,
                update.reason,
                update.approver,
            )

        return await self._answer_interrupt(session_id, AgentSession.decide, update, sign)

    async def policy(self, session_id: str) -> list[StandingApproval]:
        """The session's standing approvals: tools whose later calls run without asking."""
        return (await self.pending(session_id)).standing

    async def revoke(self, session_id: str, tool: str, *, by: str | None = None) -> RevokeAck:
        """End a tool's standing approval; its next call asks a person again.

        Raises:
            RequestRejected: the tool has no standing approval, or ``by`` is not an approver.
        """
        return await self._update(session_id, AgentSession.revoke, RevokeInput(tool=tool, by=by))

    async def budget(
        self,
        session_id: str,
        *,
        tokens: int | None = None,
        cost_usd: float | None = None,
        by: str | None = None,
    ) -> BudgetAck:
        """Raise (or set) the session's token or cost budget; a turn parked on it goes on.

        Raises:
            RequestRejected: neither is given, or ``by`` is not an approver of the session.
        """
        update = BudgetInput(tokens=tokens, cost_usd=cost_usd, by=by)
        return await self._update(session_id, AgentSession.budget, update)

    async def respond(
        self,
        session_id: str,
        interrupt_id: str,
        value: Any,
        *,
        responder: str | None = None,
        key: ApproverKey | None = None,
    ) -> InterruptAck:
        """Answer a tool's question (the validated ``respond`` update).

        Args:
            session_id: the session.
            interrupt_id: the question's interrupt id.
            value: the answer, any JSON value.
            responder: who answers; checked against the session's approvers.
            key: the responder's private key, to sign with (sessions with approver keys).

        Raises:
            RequestRejected: the id is unknown, no longer pending or not a question, the
                responder is not allowed, or the signature is missing or wrong; nothing was
                written to the session's history.
        """
        update = Answer(interrupt_id=interrupt_id, value=value, responder=responder)

        async def sign() -> None:
            update.signature = await self._signature(
                key, session_id, interrupt_id, "respond", value, None, responder
            )

        return await self._answer_interrupt(session_id, AgentSession.respond, update, sign)

    async def _answer_interrupt(
        self,
        session_id: str,
        update: UpdateMethodMultiParam[[AgentSession, P], InterruptAck],
        arg: P,
        sign: Callable[[], Awaitable[None]],
    ) -> InterruptAck:
        """``decide`` and ``respond``: the update, sent again while its interrupt is not there yet.

        ``sign`` signs ``arg`` before each try, for the interrupt as the session shows it
        then. See ``keel.worker.client.calls.SETTLE_DELAYS_S``.
        """

        async def send() -> InterruptAck:
            await sign()
            return await self._update(session_id, update, arg)

        return await settling(send, UnknownInterrupt.__name__)

    async def _signature(
        self,
        key: ApproverKey | None,
        session_id: str,
        interrupt_id: str,
        kind: Literal["decide", "respond"],
        what: Any,
        reason: str | None,
        who: str | None,
    ) -> str | None:
        """The approver's signature for the interrupt as the session shows it; None without a key.

        Signed over what the session shows now (its tool, input and signing version) and this
        client's namespace. An interrupt the session does not show as pending gets no
        signature: the session refuses the request for that reason (unknown, or decided).
        """
        if key is None:
            return None
        shown = await self.pending(session_id)
        interrupt = next((i for i in shown.interrupts if i.id == interrupt_id), None)
        if interrupt is None:
            return None
        return key.sign_for(
            interrupt,
            namespace=self.client.namespace,
            session_id=session_id,
            kind=kind,
            what=what,
            reason=reason,
            approver=who,
        )
