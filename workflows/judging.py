"""A judge in the gate (auto mode): code or a model that decides some gated calls for people.

A session that names a judge (``SessionConfig.judge``, a ``module:function`` on the workers,
or ``judge_model``, a model spec) and criteria for a tool (``judge_criteria[TOOL]``:
``approve_when``, ``escalate_when``, ``deny_when``, ``min_confidence``) asks the judge, as the
activity ``keel.judge.decide``, about each call of that tool that needs approval and that no
standing approval covers. The call's interrupt is open the whole time, so a person may decide
first, which cancels the judge. The judge's verdict counts only within these rules, which are
the workflow's, not the judge's:

- it approves only with a confidence of at least ``min_confidence``;
- it may deny (``deny_when``); the model gets the reason, as from a person;
- anything else (escalate, low confidence, an error, a timeout, an answer that is no verdict)
  leaves the request with a person, with the judge's reason in its ``note``;
- a tool declared ``requires_approval="always"``, or one without criteria, is never judged.

Every verdict is an event (``judge_verdict``: action, reason, confidence, latency in ms).

Pure module: imported by workflow code.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict
    from keel.workflows.activity_options import JUDGE_ACTIVITY, JUDGE_RETRY, JUDGE_START_TO_CLOSE
    from keel.workflows.contracts import Interrupt, JudgeCriteria, SessionConfig, ToolSpec
    from keel.workflows.cycle import failure_text
    from keel.workflows.ledger import Ledger

JUDGE = "judge"


def criteria_for(config: SessionConfig, spec: ToolSpec) -> JudgeCriteria | None:
    """The criteria a judge holds this tool's calls against; None: a person decides."""
    if config.judge is None and config.judge_model is None:
        return None
    if spec.requires_approval == "always":
        return None
    return config.judge_criteria.get(spec.name)


async def judge(
    config: SessionConfig, ledger: Ledger, interrupt: Interrupt, criteria: JudgeCriteria
) -> None:
    """Ask the judge about a pending approval; act on its verdict within the rules.

    Cancelled (a person decided first), it stops with the activity it waits on.
    """
    started = workflow.now()
    try:
        verdict = await workflow.execute_activity(
            JUDGE_ACTIVITY,
            JudgeRequest(
                session_id=workflow.info().workflow_id,
                tool_use=interrupt.tool_use,
                reason=interrupt.reason,
                criteria=criteria,
                judge=config.judge,
                judge_model=config.judge_model,
            ),
            result_type=JudgeVerdict,
            start_to_close_timeout=JUDGE_START_TO_CLOSE,
            retry_policy=JUDGE_RETRY,
            summary=f"judge {interrupt.tool_use.name}",
        )
    except ActivityError as err:
        verdict = JudgeVerdict(action="escalate", reason=f"the judge failed: {failure_text(err)}")
    if interrupt.status != "pending":
        return  # a person decided while the judge thought: its answer, if any, is moot
    action = verdict.action
    if action == "approve" and verdict.confidence < criteria.min_confidence:
        action = "escalate"
    _record(ledger, interrupt, verdict, action, started)
    if action == "approve":
        ledger.close_interrupt(interrupt, "approved", JUDGE, verdict.reason or "criteria met")
    elif action == "deny":
        ledger.close_interrupt(interrupt, "denied", JUDGE, verdict.reason or "criteria say no")
    else:
        interrupt.note = f"the judge left it to a person: {_why(verdict, action, criteria)}"


def _why(verdict: JudgeVerdict, action: str, criteria: JudgeCriteria) -> str:
    if verdict.action == "approve" and action == "escalate":
        return (
            f"approve with confidence {verdict.confidence:g}, under "
            f"{criteria.min_confidence:g} ({verdict.reason or 'no reason'})"
        )
    return verdict.reason or "no reason given"


def _record(
    ledger: Ledger, interrupt: Interrupt, verdict: JudgeVerdict, action: str, started: datetime
) -> None:
    latency = (workflow.now() - started).total_seconds() * 1000
    workflow.logger.info(
        "judge on %s (%s): %s, confidence %s: %s",
        interrupt.tool_use.name,
        interrupt.id,
        action,
        verdict.confidence,
        verdict.reason,
    )
    ledger.emit(
        "judge_verdict",
        turn=interrupt.turn,
        id=interrupt.id,
        tool=interrupt.tool_use.name,
        action=action,
        said=verdict.action,
        reason=verdict.reason,
        confidence=verdict.confidence,
        latency_ms=round(latency),
    )
