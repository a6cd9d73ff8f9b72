"""Sub-agents spend their parent's budget: a child's caps, and what it spent rolled up.

A sub-agent's session starts with caps no larger than what its parent has left: its token
caps (``max_turn_tokens``, ``max_session_tokens``) at most the least of the parent's turn and
session tokens left, its cost caps likewise in dollars. Children started side by side each
get what was left when they started; the parent's own check before its next model call
counts what they all spent. A parent with nothing left starts no child (the call's result
says why; the parent's next check reaches the cap). A child without a price of its own runs
at its parent's when it runs the same model.

When the child ends, what it spent (its session's tokens and cost, its own sub-agents'
included) is added to the parent's turn and session, and listed apart by sub-agent name
(``Ledger.sub_agents``, ``TurnRecord.sub_agents``). A child that ended without a result
(failed or cancelled in Temporal) spent an unknown amount: the totals say so.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from dataclasses import dataclass

from keel.workflows.budget_contracts import CapName
from keel.workflows.budgets import spending
from keel.workflows.contracts import SessionConfig, SessionResult, TurnRecord
from keel.workflows.cost import Spend
from keel.workflows.ledger import Ledger
from keel.workflows.messages import TokenUsage

# Sessions that started a sub-agent before this (no marker in their history) neither bound
# their children nor count what the children spent, so that their histories replay.
CHILD_SPEND_PATCH = "keel-sub-agent-spend"
UNKNOWN_SPEND = Spend(usage=TokenUsage(unknown=True), cost_unknown=True)


@dataclass(frozen=True)
class Left:
    """What a parent's turn may still spend: tokens and dollars; None: no cap."""

    tokens: int | None
    cost_usd: float | None

    def spent(self) -> str | None:
        """Why no child may start: the budget that is spent; None when some is left."""
        if self.tokens is not None and self.tokens <= 0:
            return "token budget is spent"
        if self.cost_usd is not None and self.cost_usd <= 0:
            return "cost budget is spent"
        return None


def _least(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def left(config: SessionConfig, ledger: Ledger, record: TurnRecord) -> Left:
    """What the running turn may still spend under its caps (``budgets.spending``)."""
    caps = spending(config, ledger, record)

    def remaining(cap: CapName) -> float | None:
        spent, limit = caps[cap]
        return None if limit is None else limit - (spent or 0.0)

    tokens = _least(remaining("turn_tokens"), remaining("session_tokens"))
    return Left(
        tokens=None if tokens is None else int(tokens),
        cost_usd=_least(remaining("turn_cost"), remaining("session_cost")),
    )


def bounded(child: SessionConfig, parent: SessionConfig, budget: Left) -> SessionConfig:
    """The child's configuration with caps no larger than what its parent has left.

    Call only when ``budget.spent()`` is None (every cap left is positive).
    """
    update: dict[str, object] = {}
    if budget.tokens is not None:
        for field in ("max_turn_tokens", "max_session_tokens"):
            own = getattr(child, field)
            update[field] = budget.tokens if own is None else min(own, budget.tokens)
    if budget.cost_usd is not None:
        for field in ("max_turn_cost_usd", "max_session_cost_usd"):
            own = getattr(child, field)
            update[field] = budget.cost_usd if own is None else min(own, budget.cost_usd)
    if child.price is None and parent.price is not None and child.model == parent.model:
        update["price"] = parent.price
    return child.model_copy(update=update) if update else child


def child_spend(result: SessionResult | None) -> Spend:
    """What a child session spent, from its result; unknown without one.

    A result from a Keel that did not price calls has no cost: unknown, not 0.
    """
    if result is None:
        return UNKNOWN_SPEND
    return Spend(
        usage=result.usage,
        cost_usd=result.cost_usd,
        cost_unknown=result.cost_unknown or result.cost_usd is None,
    )
