"""Human approval (security invariant S4): which tool uses wait, and which decisions count.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping

from workflows.boundary import InputRejected
from workflows.contracts import Decision, Interrupt, SessionConfig, ToolSpec


def needs_approval(spec: ToolSpec, config: SessionConfig) -> bool:
    """Whether a tool use must wait for a human before it runs."""
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
        InputRejected: the id is unknown or no longer pending, or the approver is not
            allowed.
    """
    interrupt = interrupts.get(decision.interrupt_id)
    if interrupt is None:
        waiting = [i.id for i in interrupts.values() if i.status == "pending"]
        hint = f"; pending: {', '.join(waiting)}" if waiting else "; nothing is pending"
        raise InputRejected(f"unknown interrupt id {decision.interrupt_id!r}{hint}")
    if interrupt.status != "pending":
        raise InputRejected(
            f"interrupt {interrupt.id!r} is no longer pending: it was {interrupt.status}"
        )
    if interrupt.kind != "approval":
        raise InputRejected(f"interrupt {interrupt.id!r} is a {interrupt.kind}; use respond")
    if config.approvers:
        if not decision.approver:
            raise InputRejected("this session names its approvers; the decision names none")
        if decision.approver not in config.approvers:
            raise InputRejected(f"{decision.approver!r} is not an approver of this session")
    return interrupt


def denial_text(interrupt: Interrupt) -> str:
    """The error toolResult text the model sees for a denied or timed-out tool use."""
    who = f" by {interrupt.decided_by}" if interrupt.decided_by else ""
    why = interrupt.decision_reason or "no reason given"
    if interrupt.status == "timed_out":
        return f"tool use {interrupt.name!r} was not approved in time and did not run: {why}"
    if interrupt.status == "cancelled":
        return f"tool use {interrupt.name!r} did not run: {why}"
    return f"tool use {interrupt.name!r} was denied{who} and did not run: {why}"
