"""Plain function judges that hang (issue 39): each escalates at its timeout, and past
``JUDGE_THREADS`` hung ones the next judge is not started at all; the loop never waits."""

from __future__ import annotations

import asyncio
import threading
import time

from keel.activities import function_judges
from keel.activities.function_judges import JUDGE_THREADS, run_judge
from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict
from keel.workflows.contracts import JudgeCriteria
from keel.workflows.messages import ToolUse

REQUEST = JudgeRequest(
    session_id="s",
    tool_use=ToolUse(toolUseId="t", name="guarded_record", input={"path": "docs/a"}),
    reason="needs approval",
    criteria=JudgeCriteria(approve_when=["anything"]),
)


async def test_hung_plain_judges_hold_at_most_their_threads_then_the_next_escalates() -> None:
    release = threading.Event()
    started: list[int] = []

    def hangs(request: JudgeRequest) -> JudgeVerdict:
        started.append(1)
        release.wait(30)
        return JudgeVerdict(action="approve", reason="late", confidence=1.0)

    def quick(request: JudgeRequest) -> JudgeVerdict:
        return JudgeVerdict(action="approve", reason="at once", confidence=1.0)

    # a judge test before this one in the same process may still hold a thread for a while
    for _ in range(200):
        if function_judges._THREADS._value == JUDGE_THREADS:
            break
        await asyncio.sleep(0.05)
    try:
        began = time.monotonic()
        hung = await asyncio.gather(*(run_judge(hangs, REQUEST, 0.2) for _ in range(JUDGE_THREADS)))
        assert time.monotonic() - began < 5  # each timed out on its own; none waited in turn
        for verdict in hung:
            assert verdict.action == "escalate" and "within 0.2 s" in verdict.reason
        # every thread is held by a hung judge: the next one is not started, it escalates
        full = await run_judge(quick, REQUEST, 0.2)
        assert full.action == "escalate", full
        assert f"{JUDGE_THREADS} judges are still running" in full.reason
        assert len(started) == JUDGE_THREADS
    finally:
        release.set()
    # once the hung judges return, their threads are free again
    for _ in range(100):
        verdict = await run_judge(quick, REQUEST, 1.0)
        if verdict.action == "approve":
            break
        await asyncio.sleep(0.05)
    assert verdict.action == "approve" and verdict.reason == "at once", verdict
