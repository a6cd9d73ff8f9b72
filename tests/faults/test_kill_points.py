"""SIGKILL a worker process at every kill point and in a seeded random series; nothing is lost.

All scenarios run at once against the session's dev server (each on its own task queue, with
its own worker processes), so the suite pays for the slowest one: a dead activity is noticed
after its 10 s heartbeat timeout. Figures are written to
``fault-figures.txt`` in the test's temporary directory and printed (visible with ``-s``);
``python -m tests.faults`` runs the same scenarios one at a time for clean figures.

``KEEL_FAULT_RANDOM`` sets how many random kills run (default 4), ``KEEL_FAULT_SEED`` the seed.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.faults.harness import (
    KILL_POINTS,
    RESTART_MARGIN_S,
    Outcome,
    RandomCase,
    random_cases,
    run_all,
)
from workflows.activity_options import MODEL_HEARTBEAT, MODEL_START_TO_CLOSE, TOOL_HEARTBEAT

RANDOM_KILLS = int(os.environ.get("KEEL_FAULT_RANDOM", "4"))
SEED = int(os.environ.get("KEEL_FAULT_SEED", "7"))
# A workflow task left on a dead worker's sticky queue moves to the shared queue after this
# (temporalio's default sticky_queue_schedule_to_start_timeout).
STICKY_TIMEOUT = timedelta(seconds=10)
# What each kill point must recover within: the timeout that notices the dead worker, plus
# time for a fresh process to start and the retry's backoff.
BOUND = {
    "model_call": MODEL_HEARTBEAT,
    "tool_run": TOOL_HEARTBEAT,
    "between_tool_and_append": STICKY_TIMEOUT,
    "approval_pending": STICKY_TIMEOUT,
    "continue_as_new": max(MODEL_HEARTBEAT, TOOL_HEARTBEAT),
}

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
async def outcomes(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    workdir = tmp_path_factory.mktemp("faults")
    client = temporal_env.client
    address = client.service_client.config.target_host
    results = await run_all(
        client,
        address,
        workdir,
        random_count=RANDOM_KILLS,
        seed=SEED,
        parallel=len(KILL_POINTS) + RANDOM_KILLS,
    )
    figures = [line for outcome in results for line in outcome.figures()]
    (Path(workdir) / "fault-figures.txt").write_text("\n".join(figures) + "\n")
    print("\n" + "\n".join(figures))
    return {o.name: o for o in results}


def _explain(outcome: Outcome) -> str:
    return f"{outcome.error}\n" + "\n".join(outcome.notes)


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_point(outcomes: dict[str, Outcome], point: str) -> None:
    outcome = outcomes[point]
    assert outcome.error is None, _explain(outcome)
    assert outcome.resume_s is not None
    bound = BOUND[point].total_seconds() + RESTART_MARGIN_S
    assert outcome.resume_s < bound, f"{point} resumed after {outcome.resume_s:.1f}s"
    assert outcome.resume_s < MODEL_START_TO_CLOSE.total_seconds()


@pytest.mark.parametrize("case", random_cases(RANDOM_KILLS, SEED), ids=lambda c: str(c.seed))
def test_random_kill(outcomes: dict[str, Outcome], case: RandomCase) -> None:
    outcome = outcomes[f"random-{case.seed}"]
    assert outcome.error is None, _explain(outcome)


def test_the_kills_exercised_reruns_and_continue_as_new(outcomes: dict[str, Outcome]) -> None:
    """The series is not vacuous: tools ran twice and still had their effect once."""
    assert outcomes["tool_run"].tool_reruns == 1
    assert outcomes["continue_as_new"].runs > 1
    assert all(o.effects > 0 for o in outcomes.values())
