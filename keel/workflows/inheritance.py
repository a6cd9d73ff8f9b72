"""Sub-agent trust (S4): what a child session inherits from its parent.

A sub-agent's session is started by its parent's workflow code with the configuration the
agent file or ``SessionConfig.agents`` gives it, combined with the parent's rules for who may
decide: the child may narrow them, never widen them.

- ``approvers``: the parent's list, or the part of it that the child's own list names. A
  child list naming nobody of the parent's is refused (an empty list means "anyone").
- ``approver_keys``: the parent's keys (of the approvers left); a child that names keys
  keeps only those names, and a key that differs from the parent's for the same name is
  refused. A parent without keys lets the child require its own (narrower).
- ``approval_tools``: both lists; ``approval_timeout_s``: the shorter one.
- ``policy``: the child's, with the parent's policies in ``policies`` (every one applies).
- the judge rule: the parent's ``judge`` / ``judge_model`` and ``judge_criteria``. A child may
  not add a judge its parent has none of, nor name another; criteria it gives add to its
  parent's for the same tool (their lists joined, the higher ``min_confidence``, ``deny`` over
  ``escalate``), and criteria for a tool its parent's judge has none for are refused. Under a
  parent with ``approver_keys``, the child's judge only denies or escalates
  (``judge_may_approve``) unless the parent sets ``sub_agent_judge_may_approve``.
- ``tool_effects``: the parent's classes, which the child may make stricter (``read`` <
  ``idempotent`` < ``write``) but not looser: a tool the parent treats as ``write`` is not run
  again unasked after a crash in the child either.
- ``escalate``: the parent's steps, which a child may make stricter (an approver's step later,
  or an approver its parent lets decide from the start held back until a step), never looser:
  a child's step may not name an approver its parent does not let decide by then. A child
  naming no steps keeps its parent's. Each escalation approver keeps their key.
- standing approvals the parent hands down: only those granted by an approver the child
  kept (and, when the child requires signatures, signed by that approver's key), and none
  with bounds (``keel.workflows.standing_bounds``): a child's copy would count its uses and
  total apart from its parent's, so together they could run past the bounds; the child asks.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Sequence

from keel.workflows.approvals import signer_fingerprint
from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Effect, JudgeCriteria, SessionConfig, StandingApproval
from keel.workflows.effect_tables import EffectTableError, narrowed
from keel.workflows.escalation_contracts import (
    EscalationStep,
    escalation_approvers,
    escalation_problem,
)
from keel.workflows.standing_bounds import bounded


def child_config(parent: SessionConfig, child: SessionConfig, name: str) -> SessionConfig:
    """The configuration a sub-agent's session runs with.

    Args:
        parent: the parent session's configuration.
        child: the sub-agent's own configuration.
        name: the sub-agent's name, for errors.

    Raises:
        InputRejected: the sub-agent's rules would widen the parent's.
    """
    approvers = _approvers(parent, child, name)
    escalate = _escalation(parent, child, name)
    keys = _keys(parent, child, approvers, name, escalation_approvers(escalate))
    timeouts = [t for t in (parent.approval_timeout_s, child.approval_timeout_s) if t]
    timeout = min(timeouts) if timeouts else None
    problem = escalation_problem(escalate, approvers, keys, timeout)
    if problem is not None:
        raise InputRejected(f"sub-agent {name!r}: {problem}")
    policies = [*parent.policies, *child.policies]
    if parent.policy is not None:
        policies.append(parent.policy)
    return child.model_copy(
        update={
            "approvers": approvers,
            "approver_keys": keys,
            "escalate": escalate,
            "approval_tools": sorted({*parent.approval_tools, *child.approval_tools}),
            "approval_timeout_s": timeout,
            "policies": [p for i, p in enumerate(policies) if p not in policies[:i]],
            "tool_effects": _effects(parent, child, name),
            **_judge_rule(parent, child, name),
        }
    )


def _escalation(parent: SessionConfig, child: SessionConfig, name: str) -> list[EscalationStep]:
    """The child's escalation steps: its parent's, each approver's step as late as either says.

    An approver only the child's steps name must be one its parent lets decide by then: one
    of the parent's approvers (or anyone, when the parent names none and does not hold them
    back in a step of its own), or one of the parent's steps at or before the child's.
    """
    when = {who: step.after_s for step in parent.escalate for who in step.approvers}
    for step in child.escalate:
        for who in step.approvers:
            theirs = when.get(who)
            from_start = who in parent.approvers or (not parent.approvers and theirs is None)
            if theirs is None and not from_start:
                raise InputRejected(
                    f"sub-agent {name!r} escalates to {who!r}, whom its parent never lets "
                    "decide: a sub-agent may be stricter than its parent, never looser"
                )
            when[who] = max(step.after_s, theirs or 0.0)
    steps: dict[float, list[str]] = {}
    for who, after_s in when.items():
        steps.setdefault(after_s, []).append(who)
    return [EscalationStep(after_s=t, approvers=steps[t]) for t in sorted(steps)]


def _effects(parent: SessionConfig, child: SessionConfig, name: str) -> dict[str, Effect]:
    """The parent's effect classes, with the child's where they are as careful or more."""
    try:
        return narrowed(parent.tool_effects, child.tool_effects, name)
    except EffectTableError as err:
        raise InputRejected(str(err)) from None


def inherited_standing(
    child: SessionConfig, standing: Sequence[StandingApproval]
) -> list[StandingApproval]:
    """The parent's standing approvals a child runs on: those its own approvers granted.

    Args:
        child: the child's configuration, as ``child_config`` made it.
        standing: the parent's standing approvals.
    """
    kept = []
    for approval in standing:
        if bounded(approval):
            continue  # its uses and total are counted in the parent's session, not copied
        who = approval.granted_by
        if child.approvers and who not in child.approvers:
            continue  # granted by an approver the child dropped
        if child.approver_keys and (
            approval.key_fingerprint is None
            or approval.key_fingerprint != signer_fingerprint(child, who)
        ):
            continue  # the child requires signatures; this one was not signed by a kept key
        kept.append(approval)
    return kept


def _judge_rule(parent: SessionConfig, child: SessionConfig, name: str) -> dict[str, object]:
    """The child's judge settings: its parent's, narrowed by its own, never widened."""
    if parent.judge is None and parent.judge_model is None:
        if child.judge is not None or child.judge_model is not None:
            field = "judge" if child.judge is not None else "judge_model"
            added = child.judge or child.judge_model
            raise InputRejected(
                f"sub-agent {name!r} names {field} {added!r}, and its parent has no judge: "
                "a sub-agent may not add one (its calls go to people, as its parent's do)"
            )
        return {}
    for field, theirs, mine in (
        ("judge", parent.judge, child.judge),
        ("judge_model", parent.judge_model, child.judge_model),
    ):
        if mine is not None and mine != theirs:
            raise InputRejected(
                f"sub-agent {name!r} names {field} {mine!r}, not its parent's ({theirs!r}): "
                "a sub-agent keeps its parent's judge"
            )
    criteria = dict(parent.judge_criteria)
    for tool, own in child.judge_criteria.items():
        base = parent.judge_criteria.get(tool)
        if base is None:
            raise InputRejected(
                f"sub-agent {name!r} gives judge_criteria for tool {tool!r}, for which its "
                "parent's judge has none: a sub-agent may narrow its parent's criteria, not "
                "add a tool to them"
            )
        criteria[tool] = _narrowed(base, own)
    may_approve = child.judge_may_approve and parent.judge_may_approve
    if parent.approver_keys and not parent.sub_agent_judge_may_approve:
        may_approve = False
    return {
        "judge": parent.judge,
        "judge_model": parent.judge_model,
        "judge_criteria": criteria,
        "judge_may_approve": may_approve,
        "sub_agent_judge_may_approve": (
            child.sub_agent_judge_may_approve and parent.sub_agent_judge_may_approve
        ),
    }


def _narrowed(base: JudgeCriteria, own: JudgeCriteria) -> JudgeCriteria:
    """A parent's criteria for a tool with a child's added: never wider than the parent's."""

    def joined(theirs: list[str], mine: list[str]) -> list[str]:
        return [*theirs, *(c for c in mine if c not in theirs)]

    return JudgeCriteria(
        approve_when=joined(base.approve_when, own.approve_when),
        escalate_when=joined(base.escalate_when, own.escalate_when),
        deny_when=joined(base.deny_when, own.deny_when),
        min_confidence=max(base.min_confidence, own.min_confidence),
        on_deny_match="deny" if "deny" in (base.on_deny_match, own.on_deny_match) else "escalate",
    )


def _approvers(parent: SessionConfig, child: SessionConfig, name: str) -> list[str]:
    if not parent.approvers:
        return list(child.approvers)
    if not child.approvers:
        return list(parent.approvers)
    kept = [a for a in child.approvers if a in parent.approvers]
    if not kept:
        raise InputRejected(
            f"sub-agent {name!r} names approvers {child.approvers}, none of them an approver "
            f"of its parent ({parent.approvers}): a sub-agent may narrow the list, not widen it"
        )
    return kept


def _keys(
    parent: SessionConfig,
    child: SessionConfig,
    approvers: list[str],
    name: str,
    escalating: Sequence[str] = (),
) -> dict[str, str]:
    """The child's approver keys, narrowed to the names the child's own keys give.

    Its parent's keys of ``approvers`` (all when empty) and of its ``escalating`` approvers.
    """
    if not parent.approver_keys:
        return dict(child.approver_keys)
    for who, key in child.approver_keys.items():
        theirs = parent.approver_keys.get(who)
        if theirs is not None and theirs != key:
            raise InputRejected(
                f"sub-agent {name!r} gives approver {who!r} another key than its parent does"
            )
    keys = {
        who: key
        for who, key in parent.approver_keys.items()
        if (not approvers or who in approvers or who in escalating)
        and (not child.approver_keys or who in child.approver_keys)
    }
    if not keys:
        raise InputRejected(
            f"sub-agent {name!r} keeps none of its parent's approver keys: nobody could sign"
        )
    return keys
