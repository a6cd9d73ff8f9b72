"""A stand-in for a session that waits on an ``outcome_unknown`` interrupt, by the contract.

It answers what ``keel resolve``, ``keel effects``, ``keel show``, ``KeelClient.resolve`` and
``KeelClient.effects`` use, under the names ``AgentSession`` answers them: its start input is
a ``SessionInput`` (``KeelClient.config`` reads it from history), the ``state``, ``turn``,
``pending`` and ``effects`` queries, and the ``decide`` update, whose validator runs Keel's own
checks (``check_decision``: pending, approver, signature over what the session shows, in its
namespace; ``decision_refusal``: the decision fits the kind). So the person's side is tested
against a real Temporal before the session's workflow side opens such interrupts; nothing
else of a session is here. ``setup`` (an update) gives it its interrupts, effects and events.
"""

from __future__ import annotations

from pydantic import Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keel.workflows.approvals import check_decision
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import (
        Decision,
        Event,
        Interrupt,
        InterruptAck,
        InterruptStatus,
        KeelModel,
        PendingView,
        SessionState,
        StateQuery,
        TurnRecord,
    )
    from keel.workflows.effect_contracts import EffectsView
    from keel.workflows.interrupt_kinds import decision_refusal
    from keel.workflows.ledger import SessionInput

STATUS: dict[str, InterruptStatus] = {
    "approve": "approved",
    "deny": "denied",
    "resolve": "resolved",
}


class StandInSetup(KeelModel):
    """What the stand-in shows: its pending interrupts (of turn 1), effects and events."""

    interrupts: list[Interrupt] = Field(default_factory=list)
    effects: EffectsView = Field(default_factory=EffectsView)
    events: list[Event] = Field(default_factory=list)


@workflow.defn(name="OutcomeUnknownStandIn")
class OutcomeUnknownStandIn:
    """Turn 1 waits for a person until every interrupt is decided, then it is completed."""

    def __init__(self) -> None:
        self._input: SessionInput | None = None
        self._setup = StandInSetup()
        self._interrupts: dict[str, Interrupt] = {}
        self._taken: list[Decision] = []

    @workflow.run
    async def run(self, start: SessionInput) -> None:
        self._input = start
        await workflow.wait_condition(lambda: False)  # the test terminates it

    @workflow.update
    async def setup(self, setup: StandInSetup) -> None:
        self._setup = setup
        self._interrupts = {i.id: i for i in setup.interrupts}

    def _record(self) -> TurnRecord:
        waiting = [i for i in self._interrupts.values() if i.status == "pending"]
        status = "awaiting_human" if waiting else "completed"
        return TurnRecord(turn_id=1, status=status, interrupts=waiting)

    @workflow.query
    def state(self, query: StateQuery) -> SessionState:
        assert self._input is not None
        events = self._setup.events
        return SessionState(
            session_id=workflow.info().workflow_id,
            status="running" if self._record().status == "awaiting_human" else "idle",
            config=self._input.config,
            message_count=0,
            pending=self.pending(),
            turns=[self._record()],
            events=events[query.events_since :],
            event_count=len(events),
        )

    @workflow.query
    def turn(self, turn_id: int) -> TurnRecord:
        return self._record()

    @workflow.query
    def pending(self) -> PendingView:
        waiting = [i for i in self._interrupts.values() if i.status == "pending"]
        return PendingView(turn_id=1, interrupts=waiting)

    @workflow.query
    def effects(self) -> EffectsView:
        return self._setup.effects

    @workflow.query
    def decisions(self) -> list[Decision]:
        return self._taken

    @workflow.update
    async def decide(self, decision: Decision) -> InterruptAck:
        interrupt = self._interrupts[decision.interrupt_id]
        status = STATUS[decision.decision]
        self._interrupts[interrupt.id] = interrupt.model_copy(
            update={"status": status, "answer": decision.result, "decided_by": decision.approver}
        )
        self._taken.append(decision)
        return InterruptAck(interrupt_id=interrupt.id, turn_id=interrupt.turn, status=status)

    @decide.validator
    def _check(self, decision: Decision) -> None:
        assert self._input is not None
        info = workflow.info()
        interrupt = check_decision(
            self._interrupts, decision, self._input.config, (info.workflow_id,), info.namespace
        )
        refused = decision_refusal(interrupt, decision)
        if refused is not None:
            raise InputRejected(refused)
