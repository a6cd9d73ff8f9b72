"""The session's side of effect classes: what each journaled call did, and who settled it.

The tool activity journals ``write`` and ``idempotent`` calls and reports each run that was
not plain (``EffectReport``, ``keel.activities.tool_effects``). ``EffectBook`` keeps one
``EffectRecord`` per such call in the ledger (for ``keel effects``), emits ``tool_retried`` when
a run followed an attempt that ended without a result (or a ``read`` tool's activity was
retried by Temporal), and records how a person settled an ``outcome_unknown`` interrupt:
approved (run again: the attempts they saw are settled), resolved (their result stands) or
denied.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from temporalio import workflow

from keel.workflows.activity_contracts import ToolResponse, idempotency_key
from keel.workflows.contracts import Effect, Interrupt, SessionConfig
from keel.workflows.effect_contracts import EffectOutcome, EffectRecord, EffectsView
from keel.workflows.ledger import Ledger
from keel.workflows.messages import ToolResult, ToolResultContent, ToolUse

# Effect records a session keeps (the newest); older ones are counted in ``effects_dropped``.
MAX_EFFECTS_KEPT = 500
_SETTLED_BY: dict[str, EffectOutcome] = {
    "approved": "retried",
    "resolved": "resolved",
    "denied": "denied",
}


class EffectBook:
    """The ledger's effect records: noted from tool runs, settled by people."""

    def __init__(self, config: SessionConfig, ledger: Ledger) -> None:
        """Keep the records in ``ledger`` (carried to the next run with it)."""
        self._config = config
        self._ledger = ledger

    def view(self) -> EffectsView:
        """The ``effects`` query: every kept record, oldest first, and the tools' classes."""
        ledger, overrides = self._ledger, self._config.tool_effects
        classes = {t.name: overrides.get(t.name, t.effect) for t in ledger.tools or []}
        return EffectsView(
            effects=list(ledger.effects.values()),
            dropped=ledger.effects_dropped,
            classes={name: effect for name, effect in classes.items() if effect != "read"},
        )

    def noted(self, turn: int, cycle: int, use: ToolUse, response: ToolResponse) -> None:
        """Record what a run of the tool activity reported; say when it was a retry."""
        report = response.effect
        if report is None:
            if response.attempt is not None and response.attempt > 1:
                self._retried(
                    turn, cycle, use, response.attempt, "ended without a result (run again)"
                )
            return
        record = self._record(use, report.effect, turn, report.outcome)
        record.attempts = list(report.attempts)
        record.effect = report.effect
        if record.outcome not in ("resolved", "denied") or report.outcome != "unknown":
            record.outcome = report.outcome
        if report.outcome == "retried" and report.attempts:
            self._retried(turn, cycle, use, report.attempts[-1].attempt, report.last_ended)

    def unsettled(self, use: ToolUse) -> Interrupt | None:
        """The call's latest ``outcome_unknown`` interrupt, unless its decision was acted on."""
        record = self._ledger.effects.get(use.toolUseId)
        for interrupt in reversed(self._ledger.interrupts.values()):
            if interrupt.tool_use.toolUseId == use.toolUseId and interrupt.kind == (
                "outcome_unknown"
            ):
                acted = record is not None and record.interrupt_id == interrupt.id
                return None if acted and interrupt.status != "pending" else interrupt
        return None

    def settled_attempts(self, use: ToolUse) -> int | None:
        """How many of the call's attempts a person settled by approving a run again."""
        record = self._ledger.effects.get(use.toolUseId)
        return None if record is None or not record.settled else record.settled

    def settle(self, use: ToolUse, interrupt: Interrupt) -> ToolResult | None:
        """Act on a decided ``outcome_unknown`` interrupt once.

        Returns:
            The call's result when the person resolved it (their text, as the tool's
            result); None when they approved a run again, or did not go ahead.
        """
        # made here only for a run that reported nothing journaled (cannot be, but be whole)
        record = self._record(use, "write", interrupt.turn, "unknown")
        record.interrupt_id = interrupt.id
        record.decided_by = interrupt.decided_by
        record.outcome = _SETTLED_BY.get(interrupt.status, "unknown")
        if interrupt.status == "approved":
            record.settled = len(record.attempts)
        if interrupt.status != "resolved":
            return None
        text = interrupt.answer if isinstance(interrupt.answer, str) else str(interrupt.answer)
        return ToolResult(toolUseId=use.toolUseId, content=[ToolResultContent(text=text)])

    def _record(
        self, use: ToolUse, effect: Effect, turn: int, outcome: EffectOutcome
    ) -> EffectRecord:
        """The call's record; a new one (kept, the oldest let go past the bound) if none."""
        effects = self._ledger.effects
        record = effects.get(use.toolUseId)
        if record is not None:
            return record
        record = EffectRecord(
            tool=use.name,
            tool_use_id=use.toolUseId,
            idempotency_key=idempotency_key(workflow.info().workflow_id, use.toolUseId),
            effect=effect,
            turn=turn,
            outcome=outcome,
        )
        effects[record.tool_use_id] = record
        while len(effects) > MAX_EFFECTS_KEPT:
            del effects[next(iter(effects))]
            self._ledger.effects_dropped += 1
        return record

    def _retried(
        self, turn: int, cycle: int, use: ToolUse, attempt: int, previous: str | None
    ) -> None:
        self._ledger.emit(
            "tool_retried",
            turn=turn,
            cycle=cycle,
            tool=use.name,
            id=use.toolUseId,
            attempt=attempt,
            previous=previous or "ended without a result",
        )
