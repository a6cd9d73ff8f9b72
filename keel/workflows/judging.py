"""A judge in the gate (auto mode): code or a model that decides some gated calls for people.

A session that names a judge (``SessionConfig.judge``, a ``@judge`` function of the workers'
modules, or ``judge_model``, a model spec) and criteria for a tool (``judge_criteria[TOOL]``:
``approve_when``, ``escalate_when``, ``deny_when``, ``min_confidence``) asks the judge, as the
activity ``keel.judge.decide``, about each call of that tool that needs approval and that no
standing approval covers. The call's interrupt is open the whole time, so a person may decide
first, which cancels the judge. The judge's verdict counts only within these rules, which are
the workflow's, not the judge's:

- a criterion written as a test (``path startswith "/etc"``, as standing approvals read) is
  checked here, on the call's input, not left to the judge: a call matching a ``deny_when``
  test is denied (or left to a person, ``on_deny_match="escalate"``) and one matching an
  ``escalate_when`` test goes to a person, both without asking the judge; an approval of a
  call that fails an ``approve_when`` test goes to a person. Other text is the judge's to weigh;
- it approves only with a confidence of at least ``min_confidence``, and only in a session
  whose judge may approve (``judge_may_approve``: not a sub-agent's judge where its parent
  requires signed approvals, unless the parent allows it);
- it may deny (``deny_when``); the model gets the reason, as from a person;
- anything else (escalate, low confidence, an error, a timeout, an answer that is no verdict)
  leaves the request with a person, with the judge's reason in its ``note``;
- a tool declared ``requires_approval="always"``, or one without criteria, is never judged.

Every verdict is an event (``judge_verdict``: action, what was said, reason, confidence,
latency in ms); a decision by the tests says ``criteria``. Sessions from before the tests were
enforced (no ``JUDGE_TESTS_PATCH`` marker) replay as they ran: their criteria were all text.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict
    from keel.workflows.activity_options import JUDGE_ACTIVITY, JUDGE_RETRY, JUDGE_START_TO_CLOSE
    from keel.workflows.contracts import (
        Condition,
        Interrupt,
        JudgeCriteria,
        SessionConfig,
        ToolSpec,
    )
    from keel.workflows.cycle import failure_text
    from keel.workflows.ledger import Ledger
    from keel.workflows.standing import matches, may_match, parse_conditions
    from keel.workflows.status_attribute import model_label, short

JUDGE = "judge"
# Criteria written as tests are enforced by the workflow (see the module's docstring).
JUDGE_TESTS_PATCH = "keel-judge-criteria-tests"
Tests = list[tuple[str, list[Condition]]]


def criteria_for(config: SessionConfig, spec: ToolSpec) -> JudgeCriteria | None:
    """The criteria a judge holds this tool's calls against; None: a person decides."""
    if config.judge is None and config.judge_model is None:
        return None
    if spec.requires_approval == "always":
        return None
    return config.judge_criteria.get(spec.name)


def criteria_tests(texts: Sequence[str]) -> Tests:
    """The criteria that are tests (``path startswith "/etc"``), each with its conditions."""
    found: Tests = []
    for text in texts:
        try:
            found.append((text, parse_conditions(text)))
        except ValueError:
            continue  # text for the judge to weigh
    return found


def _first_match(tests: Tests, tool_input: Any) -> str | None:
    """The first ``deny_when`` / ``escalate_when`` test the call matches, or might.

    A string with a ``..`` segment or a control character that a test does not name counts
    as matching here (``/etc/../x`` may well be under ``/etc``), where ``approve_when`` reads
    it as not matching: doubt goes to the stricter side both ways.
    """
    return next((text for text, conditions in tests if may_match(conditions, tool_input)), None)


def before_asking(criteria: JudgeCriteria, tool_input: Any) -> tuple[str, str] | None:
    """What the tests decide before any judge is asked: (action, reason), or None."""
    denied = _first_match(criteria_tests(criteria.deny_when), tool_input)
    if denied is not None:
        return criteria.on_deny_match, f"deny_when holds: {denied}"
    escalated = _first_match(criteria_tests(criteria.escalate_when), tool_input)
    if escalated is not None:
        return "escalate", f"escalate_when holds: {escalated}"
    return None


def _approve_fails(criteria: JudgeCriteria, tool_input: Any) -> str | None:
    """The first ``approve_when`` test the call fails, if any."""
    tests = criteria_tests(criteria.approve_when)
    return next((t for t, conditions in tests if not matches(conditions, tool_input)), None)


def _enforces_tests(criteria: JudgeCriteria) -> bool:
    """Whether this run checks the criteria's tests itself (not when replaying an older one)."""
    texts = [*criteria.deny_when, *criteria.escalate_when, *criteria.approve_when]
    return bool(criteria_tests(texts)) and workflow.patched(JUDGE_TESTS_PATCH)


async def judge(
    config: SessionConfig, ledger: Ledger, interrupt: Interrupt, criteria: JudgeCriteria
) -> None:
    """Ask the judge about a pending approval; act on its verdict within the rules.

    Cancelled (a person decided first), it stops with the activity it waits on.
    """
    started = workflow.now()
    tool_input = interrupt.tool_use.input
    enforced = _enforces_tests(criteria)
    early = before_asking(criteria, tool_input) if enforced else None
    if early is not None:
        if interrupt.status != "pending":
            return  # a person decided first
        action, reason = early
        settled = JudgeVerdict(
            action="deny" if action == "deny" else "escalate", reason=reason, confidence=1.0
        )
        _settle(ledger, interrupt, settled, action, started, said="criteria")
        return
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
            summary=judge_summary(config, interrupt),
        )
    except ActivityError as err:
        verdict = JudgeVerdict(action="escalate", reason=f"the judge failed: {failure_text(err)}")
    if interrupt.status != "pending":
        return  # a person decided while the judge thought: its answer, if any, is moot
    action, why = verdict.action, None
    said = f"({verdict.reason or 'no reason'})"
    if action == "approve" and verdict.confidence < criteria.min_confidence:
        action = "escalate"
        why = (
            f"approve with confidence {verdict.confidence:g}, under "
            f"{criteria.min_confidence:g} {said}"
        )
    elif action == "approve" and enforced and (failed := _approve_fails(criteria, tool_input)):
        action, why = "escalate", f"approve, but approve_when does not hold: {failed} {said}"
    elif action == "approve" and not config.judge_may_approve:
        action = "escalate"
        why = f"approve, but this session's judge may only deny or escalate {said}"
    _settle(ledger, interrupt, verdict, action, started, why=why)


def judge_summary(config: SessionConfig, interrupt: Interrupt) -> str:
    """The judge activity's summary in Temporal's UI: the tool, and the judge's model or function.

    ``judge write_file by bedrock:<model-id>``; the model spec without its options.
    """
    by = config.judge or (model_label(config.judge_model) if config.judge_model else None)
    return short(f"judge {interrupt.tool_use.name}" + (f" by {by}" if by else ""))


def _settle(
    ledger: Ledger,
    interrupt: Interrupt,
    verdict: JudgeVerdict,
    action: str,
    started: datetime,
    *,
    said: str | None = None,
    why: str | None = None,
) -> None:
    """Record the verdict and act on it: approve, deny, or leave it to a person."""
    _record(ledger, interrupt, verdict, action, started, said or verdict.action)
    if action == "approve":
        ledger.close_interrupt(interrupt, "approved", JUDGE, verdict.reason or "criteria met")
    elif action == "deny":
        ledger.close_interrupt(interrupt, "denied", JUDGE, verdict.reason or "criteria say no")
    else:
        reason = why or verdict.reason or "no reason given"
        interrupt.note = f"the judge left it to a person: {reason}"


def _record(
    ledger: Ledger,
    interrupt: Interrupt,
    verdict: JudgeVerdict,
    action: str,
    started: datetime,
    said: str,
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
        said=said,
        reason=verdict.reason,
        confidence=verdict.confidence,
        latency_ms=round(latency),
    )
