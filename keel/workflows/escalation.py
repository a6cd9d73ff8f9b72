"""Escalation: an interrupt nobody decided in time may also be decided by more approvers.

A session's ``SessionConfig.escalate`` steps each come ``after_s`` seconds after an interrupt
opened. The tool gate waits for a person with a durable timer per step (a workflow timer,
so a worker restart or a continue-as-new resumes it with the time left, computed from the
interrupt's ``opened_at``); at each step the step's approvers join those who may decide
that interrupt (``Interrupt.escalated_to``), an ``interrupt_escalated`` event is logged and
the session's ``notify`` URLs are told. Until their step comes, an escalation approver may
not decide it (``keel.workflows.approvals``). The approval timeout stays the last word.

The interrupt records how far it escalated, so the views say who may decide now and when
the next step comes (``Interrupt.may_decide``, ``next_escalation_at``, ``next_approvers``).

Pure module: imported by workflow code (the caller passes the workflow's time).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from keel.workflows.contracts import Interrupt, SessionConfig
from keel.workflows.escalation_contracts import EscalationStep, escalation_approvers


def base_deciders(config: SessionConfig) -> list[str]:
    """Who may decide any interrupt of the session from the start; empty: anyone.

    The session's ``approvers``; else, on a signed session, those with a key who are not
    escalation approvers; else nobody is named (anyone but the escalation approvers).
    """
    if config.approvers:
        return list(config.approvers)
    later = set(escalation_approvers(config.escalate))
    return sorted(who for who in config.approver_keys if who not in later)


def waiting_approvers(config: SessionConfig, interrupt: Interrupt) -> set[str]:
    """The escalation approvers who may not decide this interrupt yet (their step is to come).

    On a sub-agent's interrupt shown in its parent, the child's session escalates it and
    ``interrupt.escalated_to`` says how far: the parent's steps only hold back its approvers
    until the child's steps reached them.
    """
    named = escalation_approvers(config.escalate)
    return {who for who in named if who not in interrupt.escalated_to} - set(config.approvers)


def started(config: SessionConfig, interrupt: Interrupt, now: datetime) -> None:
    """Record on a new interrupt when it opened and what its first step will be."""
    if not config.escalate:
        return
    interrupt.opened_at = now.isoformat()
    _show_next(config, interrupt)


def next_step(
    config: SessionConfig, interrupt: Interrupt
) -> tuple[EscalationStep, datetime] | None:
    """The interrupt's next escalation step and when it comes; None after the last."""
    if interrupt.escalated >= len(config.escalate) or interrupt.opened_at is None:
        return None
    step = config.escalate[interrupt.escalated]
    return step, datetime.fromisoformat(interrupt.opened_at) + timedelta(seconds=step.after_s)


def escalate(config: SessionConfig, interrupt: Interrupt, now: datetime) -> EscalationStep:
    """Take the interrupt's next step: its approvers may decide it from now on.

    The step is recorded as come at ``now``, never before it was due: a query answered by a
    worker that replays the history from the start, while the task that the step's timer
    scheduled has not started yet, sees the timer fired with the time of the task before
    (the one that opened the interrupt) as ``workflow.now()``.

    Raises:
        ValueError: it has no step left (a caller's bug).
    """
    coming = next_step(config, interrupt)
    if coming is None:
        raise ValueError(f"interrupt {interrupt.id!r} has no escalation step left")
    step, due = coming
    interrupt.escalated += 1
    interrupt.escalated_to = [*interrupt.escalated_to, *step.approvers]
    interrupt.escalated_at = max(now, due).isoformat()
    _show_next(config, interrupt)
    return step


def _show_next(config: SessionConfig, interrupt: Interrupt) -> None:
    """Who may decide now, and the step to come, as the views show them."""
    base = base_deciders(config)
    interrupt.may_decide = [*base, *interrupt.escalated_to] if base else []
    coming = next_step(config, interrupt)
    interrupt.next_escalation_at = None if coming is None else coming[1].isoformat()
    interrupt.next_approvers = [] if coming is None else list(coming[0].approvers)


def mirrored(mine: Interrupt, theirs: Interrupt) -> list[str]:
    """Copy a child's escalation onto its interrupt shown in the parent.

    Returns:
        The approvers the child's steps added since the copy was last brought up to date
        (empty when it did not escalate further).
    """
    if theirs.escalated <= mine.escalated:
        return []
    added = [who for who in theirs.escalated_to if who not in mine.escalated_to]
    for field in (
        "escalated",
        "escalated_to",
        "escalated_at",
        "may_decide",
        "next_escalation_at",
        "next_approvers",
    ):
        setattr(mine, field, getattr(theirs, field))
    return added
