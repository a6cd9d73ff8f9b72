"""The bounds of a standing approval: how many calls, for how long, up to what running total.

``keel approve --always`` may bound what it lets run: ``--max-uses N`` (later calls at most),
``--for DURATION`` (from the grant, on the workflow's clock) and ``--total 'amount <= 100'``
(the sum of a numeric field over the calls it covers). The call the decision approves is the
person's own: the bounds count the later calls the approval covers (and those waiting beside
it that it approves at once). A call past a bound is not covered: it asks a person, as any
call does. Past ``max_uses``, at ``expires_at`` or once the total is spent, the approval ends
(``standing_approval_exhausted``); a call whose amount does not fit what is left of the total
asks, and the approval stays for smaller ones.

For the total, the field must be a number in each covered call's input, finite and not
negative (a negative amount would give back what was spent): a call without it, or with a
string, a boolean or a negative number there, is not covered.

Pure module: imported by workflow code (``now`` is ``workflow.now()`` there).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Condition, Decision, StandingApproval

TOTAL_OPS = ("<=", "<")
"""The operators of a ``total``: the sum stays at or under, or under, its limit."""
_MISSING = object()

_INF = float("inf")


def bounded(approval: StandingApproval) -> bool:
    """Whether the approval has any bound (else it covers calls as before bounds)."""
    return (
        approval.max_uses is not None
        or approval.expires_at is not None
        or approval.total is not None
    )


def check_bounds(decision: Decision) -> None:
    """Refuse bounds without ``always``, or a ``total`` that is not a numeric limit.

    Raises:
        InputRejected: naming the field.
    """
    named = [
        name
        for name, value in (
            ("max_uses", decision.max_uses),
            ("for_s", decision.for_s),
            ("total", decision.total),
        )
        if value is not None
    ]
    if named and not decision.always:
        verb = "needs" if len(named) == 1 else "need"
        raise InputRejected(
            f"{' and '.join(named)} {verb} always: bounds are a standing approval's"
        )
    total = decision.total
    if total is None:
        return
    if total.op not in TOTAL_OPS:
        raise InputRejected(
            f"total: the operator must be <= or < (a sum that stays under a limit), not {total.op}"
        )
    if not _number(total.value) or total.value <= 0:
        raise InputRejected(f"total: the limit must be a positive number, not {total.value!r}")


def granted(approval: StandingApproval, decision: Decision, now: datetime) -> None:
    """Set a new standing approval's bounds from the decision that grants it, at ``now``."""
    approval.max_uses = decision.max_uses
    approval.total = decision.total
    if decision.for_s is not None:
        approval.expires_at = (now + timedelta(seconds=decision.for_s)).isoformat()


def signed_bounds(decision: Decision) -> dict[str, Any]:
    """The bounds a signature covers, each only when set (an unbounded one signs as before).

    ``for_s`` is signed as an integer when it is one (``90``, not ``90.0``).
    """
    signed: dict[str, Any] = {}
    if decision.max_uses is not None:
        signed["max_uses"] = decision.max_uses
    if decision.for_s is not None:
        seconds = decision.for_s
        signed["for_s"] = int(seconds) if float(seconds).is_integer() else seconds
    if decision.total is not None:
        signed["total"] = decision.total.model_dump(mode="json")
    return signed


def expired(approval: StandingApproval, now: datetime) -> bool:
    """Whether the approval's time is up."""
    return approval.expires_at is not None and now >= datetime.fromisoformat(approval.expires_at)


def amount(total: Condition, tool_input: Any) -> float | None:
    """The total's field in a tool input: a finite number not below 0, else None."""
    value: Any = tool_input
    for part in total.field.split("."):
        value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
    if not _number(value) or value < 0:
        return None
    return float(value)


def fits(approval: StandingApproval, tool_input: Any, now: datetime) -> float | None:
    """What the call adds to the total (0 without one) if the approval covers it, else None.

    Not covered: time is up, no use is left, or the total's field is not a number the rest of
    the total takes.
    """
    if expired(approval, now):
        return None
    if approval.max_uses is not None and approval.uses >= approval.max_uses:
        return None
    total = approval.total
    if total is None:
        return 0.0
    added = amount(total, tool_input)
    if added is None or not _within(total, approval.spent + added):
        return None
    return added


def count(approval: StandingApproval, added: float) -> str | None:
    """Count one call the approval covered; why it ran out by that call, or None."""
    if approval.max_uses is not None:
        approval.uses += 1
        if approval.uses >= approval.max_uses:
            return f"used {approval.uses} of {approval.max_uses} time(s)"
    if approval.total is not None:
        approval.spent += added
        if approval.spent >= approval.total.value:
            return f"{approval.total.field} totals {approval.spent:g} of {approval.total.value:g}"
    return None


def left(approval: StandingApproval, now: datetime) -> dict[str, Any]:
    """What is left of each bound set: ``uses_left``, ``expires_in_s``, ``total_left``."""
    out: dict[str, Any] = {}
    if approval.max_uses is not None:
        out["uses_left"] = max(approval.max_uses - approval.uses, 0)
    if approval.expires_at is not None:
        remaining = datetime.fromisoformat(approval.expires_at) - now
        out["expires_in_s"] = max(remaining.total_seconds(), 0.0)
    if approval.total is not None:
        out["total_left"] = max(float(approval.total.value) - approval.spent, 0.0)
    return out


def describe_left(approval: StandingApproval, now: datetime) -> str:
    """What is left, as a person reads it: ``1 use left, 25 s left, 40 of amount left``."""
    remaining = left(approval, now)
    said = []
    if "uses_left" in remaining:
        n = remaining["uses_left"]
        said.append(f"{n} of {approval.max_uses} use{'' if approval.max_uses == 1 else 's'} left")
    if "expires_in_s" in remaining:
        seconds = remaining["expires_in_s"]
        said.append(f"expires in {seconds:.0f} s" if seconds > 0 else "expired")
    if approval.total is not None:
        total = approval.total
        said.append(f"{remaining['total_left']:g} of {total.field} {total.op} {total.value:g} left")
    return ", ".join(said)


def _within(total: Condition, value: float) -> bool:
    limit = float(total.value)
    return value <= limit if total.op == "<=" else value < limit


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and -_INF < value < _INF
    )  # NaN compares false: not finite
