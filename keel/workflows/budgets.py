"""A turn at a cap asks a person for more, or ends: budgets that pause.

Before each model call the turn's caps are checked (``reached_cap``): its model calls
(``max_cycles_per_turn``; so the call that would pass the cap is not made), its tokens and
cost (``max_turn_tokens``, ``max_turn_cost_usd``), and the session's (``max_session_tokens``,
``max_session_cost_usd``, or what the ``budget`` update raised them to). A cap reached with
``on_budget = "ask"`` (the default) opens an interrupt of kind ``budget`` naming the cap, what
was spent and the limit (its ``tool_use`` is ``budget`` with that as input, so a signature
covers it), and the turn waits for a person, like an approval:

- approved, the turn gets the same allowance once more (``Decision.extend``: that much
  instead): a turn cap grows for this turn (``TurnRecord.allowance``), a session cap for the
  session (``Ledger.budgets``), and the turn goes on where it stopped; nothing runs twice;
- denied, timed out or cancelled, the turn ends as a cap always ended it: ``failed``, with
  the cap's stop reason (``max_cycles``, ``token_budget``, ``cost_budget``).

With ``on_budget = "fail"``, and in a history recorded before ``BUDGET_PATCH``, the turn ends
at once. A session budget raised by the ``budget`` update also approves the budget
interrupts it now covers.

Pure module: workflow code.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

from keel.workflows.budget_contracts import BudgetAck, BudgetInput, CapName
from keel.workflows.contracts import Interrupt, SessionConfig, TurnRecord
from keel.workflows.ledger import Ledger
from keel.workflows.limits import InputRejected
from keel.workflows.messages import ToolUse

# Turns that reach a cap under this patch ask a person (``on_budget = "ask"``).
BUDGET_PATCH = "keel-budget-ask"
# What a budget interrupt's tool use is named.
BUDGET_TOOL = "budget"
_STOP_REASONS: dict[CapName, str] = {
    "cycles": "max_cycles",
    "turn_tokens": "token_budget",
    "session_tokens": "token_budget",
    "turn_cost": "cost_budget",
    "session_cost": "cost_budget",
}
_SESSION_CAPS = frozenset({"session_tokens", "session_cost"})


@dataclass(frozen=True)
class Cap:
    """A cap a turn reached: which, what was spent and the limit."""

    name: CapName
    spent: float
    limit: float

    @property
    def stop_reason(self) -> str:
        """The stop reason of a turn that ends at this cap."""
        return _STOP_REASONS[self.name]

    @property
    def error(self) -> str:
        """Why the turn stopped, in one line."""
        match self.name:
            case "cycles":
                return f"turn reached its budget of {self.limit:g} model calls"
            case "turn_tokens":
                return f"turn used {self.spent:g} tokens of its budget of {self.limit:g}"
            case "session_tokens":
                return f"session used {self.spent:g} tokens of its budget of {self.limit:g}"
            case "turn_cost":
                return f"turn cost ${self.spent:.4f} of its budget of ${self.limit:g}"
            case _:
                return f"session cost ${self.spent:.4f} of its budget of ${self.limit:g}"

    def tool_use(self, turn: int) -> ToolUse:
        """The budget interrupt's tool use: one per turn, cap and limit (so one per ask)."""
        return ToolUse(
            toolUseId=f"budget-t{turn}-{self.name}-{self.limit:g}"[:64],
            name=BUDGET_TOOL,
            input={"cap": self.name, "spent": self.spent, "limit": self.limit},
        )


def session_limit(config: SessionConfig, ledger: Ledger, cap: CapName) -> float | None:
    """The session's cap now: as the ``budget`` update or a person raised it, else configured."""
    if cap in ledger.budgets:
        return ledger.budgets[cap]
    configured: float | None = config.max_session_tokens
    if cap == "session_cost":
        configured = config.max_session_cost_usd
    return None if configured is None else float(configured)


def spending(
    config: SessionConfig, ledger: Ledger, record: TurnRecord
) -> dict[CapName, tuple[float | None, float | None]]:
    """Each cap of the running turn, in the order checked: what is spent and its limit now.

    A turn cap is the configured one plus what people granted the turn
    (``TurnRecord.allowance``); a session cap is ``session_limit``. None: not known (spent),
    no cap (limit).
    """
    more = record.allowance
    return {
        "cycles": (record.cycles, _plus(config.max_cycles_per_turn, more.get("cycles"))),
        "turn_tokens": (
            record.usage.totalTokens,
            _plus(config.max_turn_tokens, more.get("turn_tokens")),
        ),
        "session_tokens": (
            ledger.usage.totalTokens,
            session_limit(config, ledger, "session_tokens"),
        ),
        "turn_cost": (record.cost_usd, _plus(config.max_turn_cost_usd, more.get("turn_cost"))),
        "session_cost": (ledger.cost_usd, session_limit(config, ledger, "session_cost")),
    }


def reached_cap(config: SessionConfig, ledger: Ledger, record: TurnRecord) -> Cap | None:
    """The first cap the turn has reached, or None: checked before each model call."""
    for name, (spent, limit) in spending(config, ledger, record).items():
        if spent is not None and limit is not None and spent >= limit:
            return Cap(name, spent, limit)
    return None


def asks(config: SessionConfig) -> bool:
    """Whether a turn at a cap asks a person (else it ends); records the patch when asked."""
    return config.on_budget == "ask" and workflow.patched(BUDGET_PATCH)


def grant(
    config: SessionConfig, ledger: Ledger, record: TurnRecord, cap: Cap, how: Interrupt
) -> None:
    """Give a turn more of a cap, as an approved budget interrupt says.

    ``how.answer`` is the decision's ``extend`` (that much more), 0 when the ``budget``
    update raised the cap already, else None: the cap's configured allowance once more.
    """
    extra = how.answer if isinstance(how.answer, int | float) else _allowance(config, cap)
    if cap.name in _SESSION_CAPS:
        if extra:
            ledger.budgets[cap.name] = cap.limit + extra
    else:
        record.allowance[cap.name] = record.allowance.get(cap.name, 0) + extra
    ledger.emit(
        "budget_granted",
        turn=record.turn_id,
        cap=cap.name,
        limit=cap.limit + extra,
        by=how.decided_by,
    )


class SessionBudgets:
    """The ``budget`` update: raise the session's own caps."""

    def __init__(self, config: SessionConfig, ledger: Ledger) -> None:
        """Raise caps of this session, kept in its ledger."""
        self._config = config
        self._ledger = ledger

    def check(self, input: BudgetInput) -> None:
        """The ``budget`` update's validator: something to raise, by an approver."""
        if input.tokens is None and input.cost_usd is None:
            raise InputRejected("a budget update names tokens, cost_usd or both")
        approvers = self._config.approvers
        if approvers and input.by not in approvers:
            raise InputRejected(f"{input.by!r} is not an approver of this session")

    def raise_caps(self, input: BudgetInput) -> BudgetAck:
        """Set the session's caps; approve the budget interrupts they now cover."""
        ledger = self._ledger
        if input.tokens is not None:
            ledger.budgets["session_tokens"] = float(input.tokens)
        if input.cost_usd is not None:
            ledger.budgets["session_cost"] = input.cost_usd
        ledger.emit("budget_raised", tokens=input.tokens, cost_usd=input.cost_usd, by=input.by)
        for interrupt in ledger.pending_interrupts():
            cap = interrupt.tool_use.input if interrupt.kind == "budget" else None
            if not isinstance(cap, dict) or cap.get("cap") not in _SESSION_CAPS:
                continue
            limit = session_limit(self._config, ledger, cap["cap"])
            if limit is None or float(cap.get("spent", 0)) < limit:
                interrupt.answer = 0  # raised here: nothing more to grant
                ledger.close_interrupt(interrupt, "approved", input.by, "session budget raised")
        tokens = session_limit(self._config, ledger, "session_tokens")
        return BudgetAck(
            tokens=None if tokens is None else int(tokens),
            cost_usd=session_limit(self._config, ledger, "session_cost"),
        )


def _plus(limit: float | None, more: float | None) -> float | None:
    return None if limit is None else limit + (more or 0)


def _allowance(config: SessionConfig, cap: Cap) -> float:
    """A cap's configured amount: what approving its interrupt grants once more."""
    configured = {
        "cycles": config.max_cycles_per_turn,
        "turn_tokens": config.max_turn_tokens,
        "session_tokens": config.max_session_tokens,
        "turn_cost": config.max_turn_cost_usd,
        "session_cost": config.max_session_cost_usd,
    }[cap.name]
    return float(configured) if configured is not None else cap.limit
