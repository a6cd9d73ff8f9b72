"""The ``wait_turn`` update: a client waits for a turn in the session, not by asking it.

A client that waits for a turn to settle (``KeelClient.run``, ``wait_turn``, ``keel run``,
``keel wait``) sends this update once; the session answers it when the turn has ended or
waits for a person. Temporal holds the client's request open until then (the update's
outcome is long-polled), so the client learns of the turn's end as soon as the workflow
task that ended it completes, as a plain workflow's caller learns of its result, and pays one
update (one Temporal Cloud Action) instead of the queries it took to see the turn otherwise.

The session answers early, with the turn as it stands, when its run is about to continue as
new (an update still waiting would hold the run open); the client then waits the other way
(``keel.worker.client.history_watch``). It refuses a wait for a turn it does not keep, and
more than ``MAX_WAITING`` waits at once: each waiting update counts against Temporal's limit
of updates in flight per workflow (10 by default), which decisions need too.

Nothing here writes to history but the update itself; the count of waits is this run's own.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import KeelModel, TurnRecord
    from keel.workflows.ledger import Ledger

WAIT_TURN_UPDATE = "wait_turn"
"""The update's name."""
MAX_WAITING = 4
"""Waits a session holds at once; more are refused (the client waits the other way)."""
TURN_ENDED = frozenset({"completed", "failed", "cancelled"})
"""A turn in one of these states is over."""
TURN_SETTLED = TURN_ENDED | {"awaiting_human"}
"""A turn in one of these states waits for nobody but a person, or is over."""


class TurnWaitInput(KeelModel):
    """Input of the ``wait_turn`` update.

    Attributes:
        turn_id: the turn, as ``prompt`` answered.
        through_interrupts: answer only once the turn has ended, not while it waits for a
            person.
    """

    turn_id: int
    through_interrupts: bool = False


class TurnWaits:
    """The ``wait_turn`` updates waiting in this run."""

    def __init__(self, ledger: Ledger) -> None:
        """Wait on ``ledger``'s turns."""
        self._ledger = ledger
        self.waiting = 0
        self.handing_over = False
        """Set when the run is about to continue as new: every wait answers now."""

    def check(self, wait: TurnWaitInput) -> None:
        """The update's validator: a kept turn, a run that stays, room for one more wait.

        Raises:
            InputRejected: naming why.
        """
        if self.handing_over:
            raise InputRejected(f"update {WAIT_TURN_UPDATE}: the session is continuing as new")
        if self.waiting >= MAX_WAITING:
            raise InputRejected(
                f"update {WAIT_TURN_UPDATE}: {MAX_WAITING} waits are waiting already"
            )
        if wait.turn_id not in self._ledger.turns:
            raise InputRejected(_no_turn(wait.turn_id))

    async def wait(self, wait: TurnWaitInput) -> TurnRecord:
        """The turn once it settled (or ended), or as it stands when the run hands over.

        Raises:
            InputRejected: the turn is no longer kept.
        """
        done = TURN_ENDED if wait.through_interrupts else TURN_SETTLED
        ledger = self._ledger

        def answered() -> bool:
            record = ledger.turns.get(wait.turn_id)
            return record is None or record.status in done or self.handing_over or ledger.closed

        self.waiting += 1
        try:
            await workflow.wait_condition(answered)
        finally:
            self.waiting -= 1
        record = ledger.turns.get(wait.turn_id)
        if record is None:
            raise InputRejected(_no_turn(wait.turn_id))
        return record


def _no_turn(turn_id: int) -> str:
    return f"update {WAIT_TURN_UPDATE}: no turn {turn_id} in this session (or no longer kept)"
