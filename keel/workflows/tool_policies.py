"""Tool policies: user code, run in workflow code, that decides what happens to a tool use.

A policy is a pure function of the tool use: it says run, deny (with a reason the model
sees) or require approval (with a reason the approver sees). Declare it in a module the
worker loads (a ``--tools`` module), and name it in the session's ``policy``::

    from keel.activities import Verdict, tool_policy

    @tool_policy("payments")
    def payments(use: ToolUse) -> Verdict:
        if use.name == "transfer" and use.input.get("amount", 0) > 1000:
            return Verdict.require_approval("transfers over 1000 need a second pair of eyes")
        return Verdict.run()

Because it runs in the workflow, a policy must be deterministic: no I/O, clocks, randomness
or environment reads, and the same answer for the same tool use on every replay. A policy
that raises denies the tool use, with the error as the reason.

Pure module: imported by workflow code and passed through the sandbox, so the registry the
worker filled is the one the workflow reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from keel.workflows.messages import ToolUse

Action = Literal["run", "deny", "require_approval"]


@dataclass(frozen=True)
class Verdict:
    """What a policy decided for one tool use."""

    action: Action
    reason: str | None = None

    @classmethod
    def run(cls) -> Verdict:
        """Run the tool (approval rules of the tool and session still apply)."""
        return cls("run")

    @classmethod
    def deny(cls, reason: str) -> Verdict:
        """Do not run the tool; the model gets an error toolResult with the reason."""
        return cls("deny", reason)

    @classmethod
    def require_approval(cls, reason: str | None = None) -> Verdict:
        """Run the tool only once a human approved it; the reason is shown to the approver."""
        return cls("require_approval", reason)


ToolPolicy = Callable[[ToolUse], Verdict]

_POLICIES: dict[str, ToolPolicy] = {}


def tool_policy(name: str) -> Callable[[ToolPolicy], ToolPolicy]:
    """Register a policy under a name that sessions can give as ``policy``.

    Raises:
        ValueError: another function is already registered under that name.
    """

    def register(fn: ToolPolicy) -> ToolPolicy:
        known = _POLICIES.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (
            fn.__module__,
            fn.__qualname__,
        ):
            raise ValueError(
                f"tool policy {name!r} is already registered by "
                f"{known.__module__}.{known.__qualname__}"
            )
        _POLICIES[name] = fn
        return fn

    return register


def policies_of(module: str) -> list[str]:
    """Names of the policies a module registered."""
    return [name for name, fn in _POLICIES.items() if fn.__module__ == module]


def get_policy(name: str) -> ToolPolicy | None:
    """The policy registered under a name, if any."""
    return _POLICIES.get(name)


def judge(policy_name: str | None, use: ToolUse) -> Verdict:
    """Apply a session's policy to a tool use; no policy means run.

    An unknown policy name or a policy that raises denies the tool use, saying why.
    """
    if policy_name is None:
        return Verdict.run()
    policy = get_policy(policy_name)
    if policy is None:
        return Verdict.deny(f"tool policy {policy_name!r} is not registered on this worker")
    try:
        verdict = policy(use)
    except Exception as err:  # noqa: BLE001 - a broken policy must not crash the session
        return Verdict.deny(f"tool policy {policy_name!r} failed: {type(err).__name__}: {err}")
    if not isinstance(verdict, Verdict):
        return Verdict.deny(f"tool policy {policy_name!r} returned {verdict!r}, not a Verdict")
    return verdict


_STRICTNESS = {"run": 0, "require_approval": 1, "deny": 2}


def judge_all(policy_names: Sequence[str | None], use: ToolUse) -> Verdict:
    """Apply every policy of a session (its own, its parents'); the strictest verdict counts."""
    verdict = Verdict.run()
    for name in policy_names:
        if name is None:
            continue
        theirs = judge(name, use)
        if _STRICTNESS[theirs.action] > _STRICTNESS[verdict.action]:
            verdict = theirs
    return verdict
