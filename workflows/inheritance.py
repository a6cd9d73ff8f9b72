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

Pure module: imported by workflow code.
"""

from __future__ import annotations

from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import SessionConfig


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
    keys = _keys(parent, child, approvers, name)
    timeouts = [t for t in (parent.approval_timeout_s, child.approval_timeout_s) if t]
    policies = [*parent.policies, *child.policies]
    if parent.policy is not None:
        policies.append(parent.policy)
    return child.model_copy(
        update={
            "approvers": approvers,
            "approver_keys": keys,
            "approval_tools": sorted({*parent.approval_tools, *child.approval_tools}),
            "approval_timeout_s": min(timeouts) if timeouts else None,
            "policies": [p for i, p in enumerate(policies) if p not in policies[:i]],
        }
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
    parent: SessionConfig, child: SessionConfig, approvers: list[str], name: str
) -> dict[str, str]:
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
        if (not approvers or who in approvers)
        and (not child.approver_keys or who in child.approver_keys)
    }
    if not keys:
        raise InputRejected(
            f"sub-agent {name!r} keeps none of its parent's approver keys: nobody could sign"
        )
    return keys
