"""SIGKILL a worker at each kill point of a tool run, for each effect class; count the effects.

A ``write`` tool killed after its effect never runs twice without a decision: it is settled
by its ``reconcile`` or by a person (``outcome_unknown``); ``idempotent`` and ``read`` tools
run again unasked. Each scenario has its own task queue and worker processes; all run at once.
Figures (kill point x class: effects, asked, time from the kill to the turn going on) are
written to ``effect-kill-figures.txt`` and printed (``-s``); docs/guarantees.md has the table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from keel import Decision, TurnRecord
from keel.worker.client.errors import NoWorker
from tests.fault_tools import read_attempts, read_effects
from tests.faults.harness import Run, respond, text
from tests.helpers.temporal import raw_decide

pytestmark = pytest.mark.timeout(400)
HOLD_S = 6.0  # how long the tool stays at its kill point, so the kill lands there
PARALLEL = 4


@dataclass(frozen=True)
class Case:
    """One kill point for one tool class, and how a person settles what is asked."""

    name: str
    tool: str
    point: str  # model: before the tool; body: inside it, before the effect; effect: after
    # the effect, before the return; done: after the journal has its result
    decide: str | None = None  # approve / deny / resolve, when a person is asked
    expect_effects: int = 1
    expect_asked: bool = False
    kill_while_asked: bool = False
    expect_outcome: tuple[str | None, ...] = ()  # the outcomes keel effects may list; any if ()


CASES = [
    Case("write-before-tool", "refund", "model", expect_outcome=("done",)),
    Case(
        "write-in-body",
        "refund",
        "body",
        decide="approve",
        expect_asked=True,
        expect_outcome=("retried",),
    ),
    Case(
        "write-after-effect",
        "refund",
        "effect",
        decide="resolve",
        expect_asked=True,
        kill_while_asked=True,
        expect_outcome=("resolved",),
    ),
    Case(
        "write-after-effect-denied",
        "refund",
        "effect",
        decide="deny",
        expect_asked=True,
        expect_outcome=("denied",),
    ),
    Case("write-after-result", "refund", "done", expect_outcome=("done", "recorded")),
    # reconcile finds no effect in the ledger: the tool runs again, unasked, once
    Case("reconcile-in-body", "refund_reconciled", "body", expect_outcome=("retried",)),
    Case("reconcile-after-effect", "refund_reconciled", "effect", expect_outcome=("reconciled",)),
    Case(
        "reconcile-after-result",
        "refund_reconciled",
        "done",
        expect_outcome=("done", "recorded"),
    ),
    Case("idempotent-in-body", "effect", "body", expect_outcome=("retried",)),
    Case("idempotent-after-effect", "effect", "effect", expect_outcome=("retried",)),
    Case("idempotent-after-result", "effect", "done", expect_outcome=("done", "recorded")),
    Case("read-in-body", "lookup", "body", expect_effects=0, expect_outcome=(None,)),
]


@dataclass
class Found:
    """What one case measured."""

    effects: int = 0
    asked: bool = False
    outcome: str | None = None
    resume_s: float | None = None
    starts: list[int] = field(default_factory=list)  # ctx.attempt of each run of the body
    errors: list[str] = field(default_factory=list)


async def _turn(run: Run, turn: int) -> TurnRecord:
    """The turn once it waits for a person or ended; a worker still starting is waited for."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return await run.keel.wait_turn(run.session, turn, timeout_s=120)
        except NoWorker:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _journal_done(store: Path) -> bool:
    return any(store.glob("effect/*/*-done"))


async def _scenario(client: Any, address: str, workdir: Path, case: Case) -> Found:
    run = Run(client, address, workdir / case.name, case.name)
    found = Found()
    inputs: dict[str, Any] = {}
    if case.point == "body":
        inputs = {"before_s": HOLD_S} if case.tool != "lookup" else {"hold_s": HOLD_S}
    elif case.point == "effect":
        inputs = {"hold_s": HOLD_S}
    delay = HOLD_S if case.point == "model" else 0
    config = run.config(
        [
            respond(run.effect("w1", case.tool, **inputs), stop="tool_use", delay_s=delay),
            respond(text("done")),
        ],
        approvers=["alice"],
    )
    run.start_worker()
    try:
        ack = await run.keel.prompt(run.session, "refund the order", config=config)
        steps = {"body": "start", "effect": "effect"}
        if case.point == "model":
            await _until(lambda: run.model_calls() >= 1, 60, "the model call")
        elif case.point == "done":
            await _until(lambda: _journal_done(run.workdir / "store"), 60, "the journal's result")
        else:
            step = steps[case.point]
            await _until(lambda: any(r[0] == step for r in run.runs()), 60, f"step {step}")
        killed_at = run.workers[-1].kill()
        run.start_worker()
        record = await _turn(run, ack.turn_id)
        found.resume_s = time.monotonic() - killed_at
        if record.status == "awaiting_human":
            found.asked = True
            [interrupt] = record.interrupts
            if interrupt.kind != "outcome_unknown":
                found.errors.append(f"asked {interrupt.kind}, not outcome_unknown")
            if case.kill_while_asked:  # a restart while it waits loses nothing
                run.workers[-1].kill()
                run.start_worker()
            handle = run.keel.client.get_workflow_handle(run.session)
            decision = Decision(interrupt_id=interrupt.id, decision="approve", approver="alice")
            if case.decide == "deny":
                decision = Decision(
                    interrupt_id=interrupt.id,
                    decision="deny",
                    reason="refunded by hand",
                    approver="alice",
                )
            if case.decide == "resolve":
                decision = Decision(
                    interrupt_id=interrupt.id,
                    decision="resolve",
                    result="refund w1 went through (seen in the bank's console)",
                    approver="alice",
                )
            await raw_decide(handle, "decide", decision)
            record = await _turn(run, ack.turn_id)
        if record.status != "completed":
            found.errors.append(f"turn ended {record.status}: {record.error}")
        effects = await run.keel.effects(run.session)
        found.outcome = effects[0].outcome if effects else None
        found.effects = len(read_effects(run.effects_dir))
        found.starts = [n for step, n in read_attempts(run.effects_dir) if step == "start"]
    except Exception as err:  # noqa: BLE001 - reported by the case's test, with its logs
        cause = getattr(err, "cause", None)  # an update's failure: the session's reason
        found.errors.append(f"{type(err).__name__}: {err}" + (f": {cause!r}" if cause else ""))
    finally:
        run.stop_all()
    return found


@pytest.fixture(scope="module")
async def found(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Found]:
    workdir = tmp_path_factory.mktemp("effect-kills")
    client = temporal_env.client
    address = client.service_client.config.target_host
    # at most PARALLEL at once: each has two worker processes, and the suite runs beside them
    limit = asyncio.Semaphore(PARALLEL)

    async def one(case: Case) -> Found:
        async with limit:
            return await _scenario(client, address, workdir, case)

    results = await asyncio.gather(*(one(c) for c in CASES))
    lines = [
        f"effect_kill[{c.name}] effects={r.effects} asked={r.asked} outcome={r.outcome} "
        f"resume_s={r.resume_s if r.resume_s is None else round(r.resume_s, 1)}"
        for c, r in zip(CASES, results, strict=True)
    ]
    (workdir / "effect-kill-figures.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    return {c.name: r for c, r in zip(CASES, results, strict=True)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_an_effect_happens_once_or_a_person_decides(found: dict[str, Found], case: Case) -> None:
    result = found[case.name]
    assert result.errors == [], result
    assert result.effects == case.expect_effects, result
    assert result.asked == case.expect_asked, result
    if case.expect_outcome:
        assert result.outcome in case.expect_outcome, result
    # each run of the body knows which it is (ctx.attempt): 1, then 2 when it ran again
    assert result.starts == list(range(1, len(result.starts) + 1)), result
