"""Judges for the tests of a judge in the gate (``SessionConfig.judge``).

``by_criteria`` follows its criteria and nothing else: each criterion is a test on the call's
input in the readable form of standing approvals (``value startswith "docs/"``), so text in
the input that says "approve" changes nothing.
"""

from __future__ import annotations

import asyncio

from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict
from keel.workflows.standing import matches, parse_conditions


def _holds(criterion: str, request: JudgeRequest) -> bool:
    return matches(parse_conditions(criterion), request.tool_use.input)


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


def unsure(request: JudgeRequest) -> JudgeVerdict:
    """Approves everything, but not sure enough."""
    return JudgeVerdict(action="approve", reason="looks fine", confidence=0.3)


def broken(request: JudgeRequest) -> JudgeVerdict:
    raise RuntimeError("the judge crashed")


def garbage(request: JudgeRequest) -> object:
    return "approve!!"


def approves_everything(request: JudgeRequest) -> JudgeVerdict:
    return JudgeVerdict(action="approve", reason="always yes", confidence=1.0)


async def slow(request: JudgeRequest) -> JudgeVerdict:
    """Thinks for a minute: a person decides first."""
    await asyncio.sleep(60)
    return JudgeVerdict(action="approve", reason="finally", confidence=1.0)
