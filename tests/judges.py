"""Judges for the tests of a judge in the gate (``SessionConfig.judge``).

``by_criteria`` follows its criteria and nothing else: each criterion is a test on the call's
input in the readable form of standing approvals (``value startswith "docs/"``), so text in
the input that says "approve" changes nothing.

Every judge here is marked ``@judge`` but ``unmarked``; the test workers load this module with
their tools (``--tools tests.judges``), as a worker must for its judges to run.
"""

from __future__ import annotations

import asyncio
import time

from keel import JudgeRequest, JudgeVerdict, judge
from keel.workflows.standing import matches, parse_conditions


def _holds(criterion: str, request: JudgeRequest) -> bool:
    return matches(parse_conditions(criterion), request.tool_use.input)


@judge
def by_criteria(request: JudgeRequest) -> JudgeVerdict:
    """Deny on a deny criterion, escalate on an escalate one, approve when all approvals hold."""
    criteria = request.criteria
    if any(_holds(c, request) for c in criteria.deny_when):
        return JudgeVerdict(action="deny", reason="a deny criterion holds", confidence=1.0)
    if any(_holds(c, request) for c in criteria.escalate_when):
        return JudgeVerdict(action="escalate", reason="an escalate criterion holds")
    if criteria.approve_when and all(_holds(c, request) for c in criteria.approve_when):
        return JudgeVerdict(action="approve", reason="the approve criteria hold", confidence=0.95)
    return JudgeVerdict(action="escalate", reason="no criterion decides it", confidence=0.5)


@judge
def unsure(request: JudgeRequest) -> JudgeVerdict:
    """Approves everything, but not sure enough."""
    return JudgeVerdict(action="approve", reason="looks fine", confidence=0.3)


@judge
def broken(request: JudgeRequest) -> JudgeVerdict:
    raise RuntimeError("the judge crashed")


@judge
def garbage(request: JudgeRequest) -> object:
    return "approve!!"


@judge
def approves_everything(request: JudgeRequest) -> JudgeVerdict:
    return JudgeVerdict(action="approve", reason="always yes", confidence=1.0)


@judge
async def slow(request: JudgeRequest) -> JudgeVerdict:
    """Thinks for a minute: a person decides first."""
    await asyncio.sleep(60)
    return JudgeVerdict(action="approve", reason="finally", confidence=1.0)


# How long ``sleeps`` sleeps: longer than the test workers' judge timeout, and bounded.
SLEEP_S = 4.0


@judge
def sleeps(request: JudgeRequest) -> JudgeVerdict:
    """Blocks its thread for ``SLEEP_S`` (no await): a judge that hangs, for a while."""
    time.sleep(SLEEP_S)
    return JudgeVerdict(action="approve", reason="woke up", confidence=1.0)


@judge
async def sleeps_async(request: JudgeRequest) -> JudgeVerdict:
    """Awaits ``SLEEP_S``: cancelled at the timeout."""
    await asyncio.sleep(SLEEP_S)
    return JudgeVerdict(action="approve", reason="woke up", confidence=1.0)


def unmarked(request: JudgeRequest) -> JudgeVerdict:
    """Would approve everything, but is not marked ``@judge``: never run."""
    return JudgeVerdict(action="approve", reason="not a judge", confidence=1.0)
