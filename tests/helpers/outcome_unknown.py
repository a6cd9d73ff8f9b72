"""A session waiting on an ``outcome_unknown`` interrupt, as the stand-in workflow plays it.

``tests/fakes/outcome_unknown_session.py`` answers the contract's queries and ``decide``
update with Keel's own checks; these build what it shows and run it on a real Temporal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from keel.worker.process.sandbox import sandbox_runner
from keel.workflows.contracts import Event, Interrupt, SessionConfig
from keel.workflows.effect_contracts import EffectAttempt, EffectRecord, EffectsView
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import ToolUse
from tests.fakes.outcome_unknown_session import OutcomeUnknownStandIn, StandInSetup

AT = "2026-12-02T10:00:00+00:00"
RETRIED = {"tool": "refund", "id": "t2", "attempt": 2, "previous": "ended without a result"}


def outcome_unknown(interrupt_id: str = "ou-1", *, kind: str = "outcome_unknown") -> Interrupt:
    """A pending interrupt of turn 1: ``refund`` (toolUseId t1) may or may not have run."""
    interrupt = Interrupt(
        id=interrupt_id,
        kind="outcome_unknown",
        tool_use=ToolUse(toolUseId="t1", name="refund", input={"order": 7, "amount": 30}),
        name="refund",
        reason="tool 'refund' may have run: its attempt 1 ended without a result",
        turn=1,
        signing=2,
    )
    return interrupt.model_copy(update={"kind": kind})


def records(session: str) -> EffectsView:
    """Two journaled calls: one whose outcome is unknown, one run again and done."""
    first = EffectAttempt(attempt=1, started_at=AT, worker="w1@host")
    return EffectsView(
        effects=[
            EffectRecord(
                tool="refund",
                tool_use_id="t1",
                idempotency_key=f"{session}/t1",
                effect="write",
                turn=1,
                attempts=[first],
                outcome="unknown",
                interrupt_id="ou-1",
            ),
            EffectRecord(
                tool="refund",
                tool_use_id="t2",
                idempotency_key=f"{session}/t2",
                effect="write",
                turn=1,
                attempts=[
                    first,
                    EffectAttempt(
                        attempt=2,
                        started_at="2026-12-02T10:01:00+00:00",
                        ended_at="2026-12-02T10:01:02+00:00",
                        ended="returned",
                        worker="w2@host",
                    ),
                ],
                outcome="retried",
                decided_by="ana",
                interrupt_id="ou-0",
            ),
        ],
        dropped=1,
    )


def retried_event(seq: int = 1) -> Event:
    """The ``tool_retried`` event of the second call."""
    return Event(seq=seq, type="tool_retried", at=AT, turn=1, cycle=1, detail=dict(RETRIED))


@asynccontextmanager
async def stand_in_worker(client: Client, task_queue: str) -> AsyncIterator[Worker]:
    """A worker of the stand-in workflow on ``task_queue``, in Keel's sandbox."""
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[OutcomeUnknownStandIn],
        workflow_runner=sandbox_runner(),
        max_cached_workflows=0,  # every task replays
    )
    async with worker:
        yield worker


async def start_stand_in(
    client: Client,
    task_queue: str,
    session: str,
    config: SessionConfig,
    interrupts: list[Interrupt],
    **shown: Any,
) -> WorkflowHandle[Any, Any]:
    """Start a stand-in session waiting on ``interrupts``; ``shown``: its effects and events."""
    handle = await client.start_workflow(
        "OutcomeUnknownStandIn", SessionInput(config=config), id=session, task_queue=task_queue
    )
    await handle.execute_update("setup", StandInSetup(interrupts=interrupts, **shown))
    return handle
