"""Escalation steps: who else may decide an interrupt nobody decided in time, and when.

A session's ``SessionConfig.escalate`` lists its steps; each names how long after an
interrupt opened it comes and the approvers it adds to those who may decide that interrupt
(``keel.workflows.escalation``).

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from keel.workflows.keel_model import KeelModel


class EscalationStep(KeelModel):
    """One step of a session's escalation.

    Attributes:
        after_s: how long after the interrupt opened the step comes, in seconds.
        approvers: who may decide the interrupt from then on (with their keys, on a session
            that wants signed decisions); they are notified then.
    """

    after_s: float = Field(gt=0)
    approvers: list[str] = Field(min_length=1)


def escalation_problem(
    steps: Sequence[EscalationStep],
    approvers: Sequence[str],
    approver_keys: Mapping[str, str],
    approval_timeout_s: float | None,
) -> str | None:
    """What is wrong with a session's escalation steps, or None.

    Steps come in increasing ``after_s``, each before the approval timeout (which stays the
    last word); an approver is named once, in one step, and is not already one of the
    session's approvers (who may decide from the start); on a session that wants signed
    decisions, each has a key (without one, they could never decide).
    """
    seen: set[str] = set()
    last = 0.0
    for step in steps:
        if step.after_s <= last:
            return (
                f"escalation steps must come in increasing time: {step.after_s:g} s comes "
                f"after {last:g} s"
            )
        last = step.after_s
        if approval_timeout_s is not None and step.after_s >= approval_timeout_s:
            return (
                f"the escalation step at {step.after_s:g} s comes at or after the approval "
                f"timeout ({approval_timeout_s:g} s): it would never come"
            )
        for who in step.approvers:
            if not who.strip():
                return "an escalation step names an empty approver"
            if who in seen:
                return f"escalation approver {who!r} is named in more than one step"
            if who in approvers:
                return (
                    f"escalation approver {who!r} is already one of the session's approvers "
                    "(who may decide from the start)"
                )
            if approver_keys and who not in approver_keys:
                return (
                    f"escalation approver {who!r} has no approver key, and this session wants "
                    "signed decisions: they could never decide"
                )
            seen.add(who)
    return None


def escalation_approvers(steps: Sequence[EscalationStep]) -> list[str]:
    """Every approver the steps name, in order."""
    return [who for step in steps for who in step.approvers]
