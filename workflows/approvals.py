"""Human approval (security invariant S4): which tool uses wait, and which decisions count.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping

from workflows.boundary import InputRejected
from workflows.contracts import Answer, Decision, Interrupt, SessionConfig, ToolSpec


class UnknownInterrupt(InputRejected):
    """A decision or answer names no interrupt of this session.

    Its own type, so that clients can act on it without reading the message: ``KeelClient``
    sends such a request again for a moment, as an interrupt can show before it opens.
    """


def needs_approval(spec: ToolSpec, config: SessionConfig) -> bool:
    """Whether a tool must wait for a human before it runs (declared, or named by the session)."""
    return spec.requires_approval or spec.name in config.approval_tools


def check_decision(
    interrupts: Mapping[str, Interrupt], decision: Decision, config: SessionConfig
) -> Interrupt:
    """The pending interrupt a decision names, or why the decision is refused.

    Args:
        interrupts: every interrupt this session created, by id.
        decision: the decision as received.
        config: the session's configuration (allowed approvers).

    Returns:
        The pending interrupt to decide.

    Raises:
        UnknownInterrupt: the id names no interrupt of this session.
        InputRejected: the interrupt is no longer pending or is a question, or the approver
            is not allowed.
    """
    interrupt = _pending(interrupts, decision.interrupt_id)
    if interrupt.kind != "approval":
        raise InputRejected(f"interrupt {interrupt.id!r} is a {interrupt.kind}; use respond")
    _check_person(config, decision.approver, "decision")
    return interrupt


def check_answer(
    interrupts: Mapping[str, Interrupt], answer: Answer, config: SessionConfig
) -> Interrupt:
    """The pending question an answer is for, or why the answer is refused.

    Raises:
        UnknownInterrupt: the id names no interrupt of this session.
        InputRejected: the interrupt is no longer pending or is an approval, or the
            responder is not allowed.
    """
    interrupt = _pending(interrupts, answer.interrupt_id)
    if interrupt.kind != "question":
        raise InputRejected(f"interrupt {interrupt.id!r} is an {interrupt.kind}; use decide")
    _check_person(config, answer.responder, "answer")
    return interrupt


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


def _check_person(config: SessionConfig, who: str | None, what: str) -> None:
    if config.approvers:
        if not who:
            raise InputRejected(f"this session names its approvers; the {what} names none")
        if who not in config.approvers:
            raise InputRejected(f"{who!r} is not an approver of this session")


def denial_text(interrupt: Interrupt) -> str:
    """The error toolResult text the model sees for a denied or timed-out tool use."""
    who = f" by {interrupt.decided_by}" if interrupt.decided_by else ""
    why = interrupt.decision_reason or "no reason given"
    if interrupt.status == "timed_out" and interrupt.kind == "approval":
        return f"tool use {interrupt.name!r} was not approved in time and did not run: {why}"
    tool = interrupt.tool_use.name
    if interrupt.kind == "question":
        if interrupt.status == "timed_out":
            return f"tool {tool!r} asked {interrupt.name!r} and got no answer in time: {why}"
        return f"tool {tool!r} asked {interrupt.name!r} and got no answer: {why}"
    if interrupt.status == "cancelled":
        return f"tool use {tool!r} did not run: {why}"
    return f"tool use {tool!r} was denied{who} and did not run: {why}"
