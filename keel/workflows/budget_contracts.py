"""Budgets and cost: what a session may spend, what it spent, and a person's raise.

A turn that reaches a cap (its model calls, its tokens or cost, the session's tokens or cost)
parks on an interrupt of kind ``budget`` when the session's ``on_budget`` is ``ask`` (the
default): approved, the turn gets the same allowance once more (or ``Decision.extend`` more);
denied, it ends as a cap always ended it, with the cap's stop reason
(``keel.workflows.budgets``). A session's own caps can be raised later (the ``budget``
update, ``keel budget``).

Pure module: imported by workflow code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from keel.workflows.keel_model import KeelModel

# The caps a turn may reach, by name: what ``Interrupt.tool_use.input["cap"]`` of a budget
# interrupt, ``TurnRecord.allowance`` and ``Ledger.budgets`` name.
CapName = Literal["cycles", "turn_tokens", "session_tokens", "turn_cost", "session_cost"]
# What asks or fails a turn when its cap is reached.
OnBudget = Literal["ask", "fail"]


class ModelPrice(KeelModel):
    """A model's price, in US dollars per million tokens.

    Attributes:
        input: per million input tokens.
        output: per million output tokens.
    """

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)


class BudgetInput(KeelModel):
    """Input of the ``budget`` update: raise (or set) the session's own caps.

    Attributes:
        tokens: the session's token budget from now on (``max_session_tokens``).
        cost_usd: the session's cost budget from now on (``max_session_cost_usd``).
        by: who changes it; checked against the session's approvers when it names any.
    """

    tokens: int | None = Field(default=None, gt=0)
    cost_usd: float | None = Field(default=None, gt=0)
    by: str | None = Field(default=None, max_length=200)


class BudgetAck(KeelModel):
    """Answer of the ``budget`` update: the session's caps now (None: no cap)."""

    tokens: int | None = None
    cost_usd: float | None = None
