"""Human approval (security invariant S4): which tool uses wait, and which decisions count.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Answer, Decision, Interrupt, SessionConfig, ToolSpec
from keel.workflows.escalation import waiting_approvers
from keel.workflows.interrupt_kinds import kind_of, refusal
from keel.workflows.signing import BadSignature, approval_message, fingerprint, verify
from keel.workflows.standing import signed_value


class UnknownInterrupt(InputRejected):
    """A decision or answer names no interrupt of this session.

    Its own type, so that clients can act on it without reading the message: ``KeelClient``
    sends such a request again for a moment, as an interrupt can show before it opens.
    """


def needs_approval(spec: ToolSpec, config: SessionConfig) -> bool:
    """Whether a tool must wait for a human before it runs (declared, or named by the session)."""
    return bool(spec.requires_approval) or spec.name in config.approval_tools


def check_decision(
    interrupts: Mapping[str, Interrupt],
    decision: Decision,
    config: SessionConfig,
    session_ids: Sequence[str] = ("",),
    namespace: str = "",
) -> Interrupt:
    """The pending interrupt a decision names, or why the decision is refused.

    Args:
        interrupts: every interrupt this session created, by id.
        decision: the decision as received.
        config: the session's configuration (allowed approvers, their keys).
        session_ids: the session's id, then a sub-agent session's ancestors: a signature
            must be bound to one of them (a parent forwards what was signed for it).
        namespace: the session's Temporal namespace, which a version-2 signature covers.

    Returns:
        The pending interrupt to decide.

    Raises:
        UnknownInterrupt: the id names no interrupt of this session.
        InputRejected: the interrupt is no longer pending or is a question, the approver
            is not allowed, or the session wants signed decisions and this one's signature
            is missing or does not verify.
    """
    return _checked(
        interrupts,
        decision.interrupt_id,
        config,
        _Sent("decide", signed_value(decision), decision.reason, decision.approver, "decision"),
        decision.signature,
        session_ids,
        namespace,
    )


def check_answer(
    interrupts: Mapping[str, Interrupt],
    answer: Answer,
    config: SessionConfig,
    session_ids: Sequence[str] = ("",),
    namespace: str = "",
) -> Interrupt:
    """The pending question an answer is for, or why the answer is refused (as a decision).

    Raises:
        UnknownInterrupt: the id names no interrupt of this session.
        InputRejected: the interrupt is no longer pending or is an approval, the
            responder is not allowed, or the answer's signature is missing or does not verify
            where the session wants signed answers.
    """
    return _checked(
        interrupts,
        answer.interrupt_id,
        config,
        _Sent("respond", answer.value, None, answer.responder, "answer"),
        answer.signature,
        session_ids,
        namespace,
    )


@dataclass(frozen=True)
class _Sent:
    """What a decision or an answer asks, as its signature covers it."""

    update: Literal["decide", "respond"]
    what: Any
    reason: str | None
    person: str | None
    label: str


def _checked(
    interrupts: Mapping[str, Interrupt],
    interrupt_id: str,
    config: SessionConfig,
    sent: _Sent,
    signature: str | None,
    session_ids: Sequence[str],
    namespace: str,
) -> Interrupt:
    """The pending interrupt a decision or answer names, once its person and signature pass."""
    interrupt = _pending(interrupts, interrupt_id)
    refused = refusal(interrupt, sent.update)
    if refused is not None:
        raise InputRejected(refused)
    _check_person(config, interrupt, sent.person, sent.label)
    messages = [
        approval_message(
            interrupt,
            namespace=namespace,
            session_id=session_id,
            kind=sent.update,
            what=sent.what,
            reason=sent.reason,
            approver=sent.person,
        )
        for session_id in session_ids
    ]
    _check_signature(config, sent.person, messages, signature, sent.label)
    return interrupt


def signer_fingerprint(config: SessionConfig, who: str | None) -> str | None:
    """The fingerprint of the key that signed for ``who``, when the session wants signatures."""
    if not config.approver_keys or who is None or who not in config.approver_keys:
        return None
    try:
        return fingerprint(config.approver_keys[who])
    except BadSignature:
        return None


def _pending(interrupts: Mapping[str, Interrupt], interrupt_id: str) -> Interrupt:
    interrupt = interrupts.get(interrupt_id)
    if interrupt is None:
        waiting = [i.id for i in interrupts.values() if i.status == "pending"]
        hint = f"; pending: {', '.join(waiting)}" if waiting else "; nothing is pending"
        raise UnknownInterrupt(f"unknown interrupt id {interrupt_id!r}{hint}")
    if interrupt.status != "pending":
        raise InputRejected(
            f"interrupt {interrupt.id!r} is no longer pending: it was {interrupt.status}"
        )
    return interrupt


def _check_person(config: SessionConfig, interrupt: Interrupt, who: str | None, what: str) -> None:
    """The person may decide this interrupt now: an approver, or one it escalated to."""
    if who is not None and who in waiting_approvers(config, interrupt):
        when = interrupt.next_escalation_at if who in interrupt.next_approvers else None
        raise InputRejected(
            f"{who!r} may decide interrupt {interrupt.id!r} only once it escalates to them"
            + (f" (at {when})" if when else "")
        )
    if config.approvers:
        if not who:
            raise InputRejected(f"this session names its approvers; the {what} names none")
        if who not in config.approvers and who not in interrupt.escalated_to:
            raise InputRejected(f"{who!r} is not an approver of this session")


def _check_signature(
    config: SessionConfig,
    who: str | None,
    messages: Sequence[bytes],
    signature: str | None,
    what: str,
) -> None:
    """With ``approver_keys``: the named approver's key must have signed one of ``messages``."""
    if not config.approver_keys:
        return
    if not who:
        raise InputRejected(f"this session wants signed approvals; the {what} names no approver")
    key = config.approver_keys.get(who)
    if key is None:
        raise InputRejected(f"{who!r} has no approver key in this session; the {what} is refused")
    first: BadSignature | None = None
    for message in messages:
        try:
            verify(key, message, signature)
            return
        except BadSignature as err:
            first = first or err
    raise InputRejected(f"the {what} by {who!r} is refused: {first}")


def denial_text(interrupt: Interrupt) -> str:
    """The error toolResult text the model sees for a denied or timed-out tool use."""
    who = f" by {interrupt.decided_by}" if interrupt.decided_by else ""
    why = interrupt.decision_reason or "no reason given"
    return kind_of(interrupt).model_text(interrupt, who=who, why=why)
