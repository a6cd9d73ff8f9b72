"""A replay session's tool calls, answered from its recording (``SessionConfig.replay``).

Each tool call the new model makes is answered from the recording when it matches a recorded
call of the same turn not answered yet: the same tool with the same canonical input, the
first such in the recording's order (so repeated calls match in order, and calls of one
response may come in another order). Nothing runs: the recorded result is the model's, under
the new call's toolUseId. The first call that matches none is the divergence: it gets an
error result, as does every later call of its turn, and the turn ends once the cycle's
results are in the conversation (S5), with stop reason ``replay_diverged``.

With ``ReplayPlan.live_read``, an unmatched call of a ``read`` tool that needs no approval
runs live instead (the gate's usual path: policies still apply). Nothing else ever runs in a
replay: no ``write`` or ``idempotent`` tool, no sub-agent, no client-side tool, nothing that
needs a person. A replay session never parks for approval.

Pure module: workflow code.
"""

from __future__ import annotations

from keel.workflows.approvals import needs_approval
from keel.workflows.contracts import SessionConfig, ToolSpec, TurnRecord
from keel.workflows.ledger import Ledger
from keel.workflows.messages import ToolResult, ToolUse, error_result
from keel.workflows.replay_contracts import (
    REPLAY_DIVERGED,
    Divergence,
    RecordedCall,
    ReplayPlan,
    ReplayProgress,
    canonical_input,
)
from keel.workflows.tool_policies import judge_all

LIVE = None  # ``Replayer.answer``: the call runs live


class Replayer:
    """Answers a replay session's tool calls from its recording; finds the divergence."""

    def __init__(self, config: SessionConfig, ledger: Ledger) -> None:
        """Follow ``config.replay`` (None: not a replay session) in ``ledger.replay``."""
        self._config = config
        self._plan: ReplayPlan | None = config.replay
        self._ledger = ledger
        if self._plan is not None and ledger.replay is None:
            ledger.replay = ReplayProgress()

    @property
    def active(self) -> bool:
        """Whether this session is a replay."""
        return self._plan is not None

    def answer(self, record: TurnRecord, use: ToolUse, spec: ToolSpec | None) -> ToolResult | None:
        """The recorded result of a call, an error result past the divergence, or ``LIVE``.

        Args:
            record: the replay's turn.
            use: the call the new model made.
            spec: its tool, if the session has it.
        """
        plan, progress = self._plan, self._ledger.replay
        assert plan is not None and progress is not None, "not a replay session"
        turn = record.turn_id
        index = progress.calls.get(turn, 0)
        progress.calls[turn] = index + 1
        if progress.divergence is not None and progress.divergence.turn == turn:
            return error_result(use.toolUseId, "not run: this replay already diverged")
        recorded = plan.turns[turn - 1] if turn <= len(plan.turns) else []
        matched = progress.matched.setdefault(turn, [])
        found = _match(recorded, matched, use)
        if found is not None:
            matched.append(found)
            result = recorded[found].result
            self._ledger.emit("replay_answered", turn=turn, tool=use.name, id=use.toolUseId)
            return result.model_copy(update={"toolUseId": use.toolUseId})
        if plan.live_read and self._may_run_live(use, spec):
            progress.live.append(use.toolUseId)
            self._ledger.emit("replay_live_read", turn=turn, tool=use.name, id=use.toolUseId)
            return LIVE
        expected = next((c for i, c in enumerate(recorded) if i not in matched), None)
        progress.divergence = Divergence(
            turn=turn,
            index=index,
            recorded=expected.tool_use() if expected is not None else None,
            replayed=use,
        )
        self._ledger.emit(
            "replay_diverged",
            turn=turn,
            index=index,
            tool=use.name,
            id=use.toolUseId,
            expected=expected.name if expected is not None else None,
        )
        said = (
            f"the recording's next call was {expected.name!r} with other input"
            if expected is not None
            else "the recording's turn made no more calls"
        )
        return error_result(
            use.toolUseId, f"not run: this replay diverged here ({said}); no tool runs in a replay"
        )

    def diverged(self, record: TurnRecord) -> bool:
        """End the turn if it diverged; True when it did (its cycle's results are in)."""
        progress = self._ledger.replay
        if progress is None or progress.divergence is None:
            return False
        if progress.divergence.turn != record.turn_id:
            return False
        use = progress.divergence.replayed
        error = (
            f"the replay diverged at call {progress.divergence.index + 1} of turn "
            f"{record.turn_id}: {use.name} matches no recorded call"
        )
        self._ledger.end_turn(record, "failed", REPLAY_DIVERGED, error=error)
        return True

    def _may_run_live(self, use: ToolUse, spec: ToolSpec | None) -> bool:
        """Whether an unmatched call may run live: a ``read`` worker tool needing nobody."""
        config = self._config
        if spec is None or use.name in config.agents or spec.runs_on != "worker":
            return False
        if config.tool_effects.get(use.name, spec.effect) != "read":
            return False
        if needs_approval(spec, config):
            return False
        verdict = judge_all([config.policy, *config.policies], use)
        return verdict.action == "run"


def _match(recorded: list[RecordedCall], matched: list[int], use: ToolUse) -> int | None:
    """The first recorded call not matched yet with the same tool and canonical input."""
    wanted = canonical_input(use.input)
    for i, call in enumerate(recorded):
        if i not in matched and call.name == use.name and canonical_input(call.input) == wanted:
            return i
    return None
