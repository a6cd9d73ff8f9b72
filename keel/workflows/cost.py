"""Cost in US dollars: a model call's, a sum's, and how it reads.

The model activity prices each call (``keel.activities.prices``): with the session's own
``SessionConfig.price``, else the worker's price table (``KEEL_PRICES``), and returns the
cost in ``ModelResponse.cost_usd``; the workflow only adds up what history recorded, so it
stays deterministic and a replay sees what each call cost when it ran.

A sum is the known part and a flag: ``cost_usd`` adds the calls whose cost is known (None
while none is), ``cost_unknown`` says some call's cost is not (no price, or usage the model
server did not report), so the sum is "at least" that much. A cost is never taken as 0
because it is unknown.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from pydantic import Field

from keel.workflows.budget_contracts import ModelPrice
from keel.workflows.keel_model import KeelModel
from keel.workflows.messages import TokenUsage

PER_TOKENS = 1_000_000  # prices are per million tokens


class Spend(KeelModel):
    """What something spent: its tokens and its cost (see the module's docstring).

    Attributes:
        usage: tokens.
        cost_usd: the known part of the cost in US dollars; None while none is known.
        cost_unknown: some of it has no known cost: ``cost_usd`` leaves that out.
    """

    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float | None = None
    cost_unknown: bool = False

    def __add__(self, other: Spend) -> Spend:
        """Sum two spends."""
        cost, unknown = add_cost(self.cost_usd, self.cost_unknown, other.cost_usd)
        return Spend(
            usage=self.usage + other.usage,
            cost_usd=cost,
            cost_unknown=unknown or other.cost_unknown,
        )


def call_cost(price: ModelPrice | None, usage: TokenUsage) -> float | None:
    """A model call's cost in US dollars; None without a price or with unknown usage."""
    if price is None or usage.unknown:
        return None
    return (usage.inputTokens * price.input + usage.outputTokens * price.output) / PER_TOKENS


def add_cost(total: float | None, unknown: bool, cost: float | None) -> tuple[float | None, bool]:
    """A sum (``total``, ``unknown``) with one more cost added (None: unknown).

    Returns:
        The new known part (None while none is known) and whether some part is unknown.
    """
    if cost is None:
        return total, True
    return (total or 0.0) + cost, unknown


def dollars(amount: float) -> str:
    """An amount as people read it: ``$1.25``, ``$0.0042``, ``$0.000013``."""
    if amount >= 1:
        return f"${amount:,.2f}"
    if amount == 0 or amount >= 0.0001:
        return f"${amount:.4f}"
    return f"${amount:.6f}"


def cost_text(cost_usd: float | None, unknown: bool) -> str:
    """A sum's cost for people: ``$0.0042``, ``at least $0.0042`` or ``cost unknown``."""
    if cost_usd is None:
        return "cost unknown" if unknown else "no cost yet"
    return f"at least {dollars(cost_usd)}" if unknown else dollars(cost_usd)
