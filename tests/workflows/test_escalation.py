"""Escalation (issue 44): an approval still pending after its time may be decided by more people.

On a real dev server: the escalation approver is refused before the step and accepted
after; signed; with the worker stopped and a new one started before the step comes (the
timer is Temporal's, not the process's); the approval timeout stays the last word. And the
rules that keep escalation from widening who decides: the session's own settings, the CLI's
flag and a sub-agent's inheritance.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError

from keel import KeelClient, RequestRejected
from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Interrupt, SessionConfig, SubAgent
from keel.workflows.escalation_contracts import EscalationStep
from keel.workflows.inheritance import child_config
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history
from tests.helpers.webhooks import receiver
from tests.workflows.test_signed_approvals import keys

STEP_S = 3.0  # long enough that a loaded machine asks before the step


def sid() -> str:
    return f"esc-{uuid.uuid4().hex[:10]}"


def steps(target: Path) -> list[dict[str, Any]]:
    asked = tool_use("g1", "guarded_record", path=str(target), value="v")
    return [respond(text("needs a human"), asked, stop="tool_use"), respond(text("done"))]


async def escalated(keel: KeelClient, session: str, timeout_s: float = 20) -> Interrupt:
    """The session's pending interrupt once it has escalated (polled)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        [interrupt] = (await keel.pending(session)).interrupts
        if interrupt.escalated:
            return interrupt
        assert asyncio.get_running_loop().time() < deadline, "the interrupt never escalated"
        await asyncio.sleep(0.1)


def waited(interrupt: Interrupt) -> float:
    """Seconds from the interrupt's opening to its escalation, as the workflow saw them."""
    assert interrupt.opened_at and interrupt.escalated_at
    opened = datetime.fromisoformat(interrupt.opened_at)
    return (datetime.fromisoformat(interrupt.escalated_at) - opened).total_seconds()


async def test_the_escalation_approver_decides_only_after_the_step(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    session = sid()
    with receiver() as hook:
        config = script(
            steps(target),
            approvers=["alice"],
            escalate=[{"after_s": STEP_S, "approvers": ["lead"]}],
            notify=[hook.url],
        )
        async with run_worker():
            waiting = await keel.run(session, "go", config=config, timeout_s=30)
            [interrupt] = waiting.interrupts
            assert interrupt.may_decide == ["alice"] and interrupt.next_approvers == ["lead"]
            assert interrupt.escalated == 0 and interrupt.next_escalation_at is not None
            with pytest.raises(RequestRejected, match="only once it escalates to them"):
                await keel.decide(session, interrupt.id, "approve", approver="lead")
            with pytest.raises(RequestRejected, match="not an approver"):
                await keel.decide(session, interrupt.id, "approve", approver="mallory")
            later = await escalated(keel, session)
            assert later.may_decide == ["alice", "lead"] and later.escalated_to == ["lead"]
            assert later.next_escalation_at is None and later.next_approvers == []
            assert STEP_S <= waited(later) < STEP_S + 10
            events = await hook.arrival(2)
            with pytest.raises(RequestRejected, match="not an approver"):
                await keel.decide(session, interrupt.id, "approve", approver="mallory")
            ack = await keel.decide(session, interrupt.id, "approve", approver="lead")
            assert ack.status == "approved"
            done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
            state = await keel.state(session)
        await save_history(keel.client, session, "escalation_approved")
    assert done.status == "completed" and target.read_text().splitlines() == ["v"]
    [step] = [e for e in state.events if e.type == "interrupt_escalated"]
    assert step.detail["approvers"] == ["lead"] and step.detail["step"] == 1
    posted = events[1].event
    assert posted["event"] == "interrupt_escalated" and posted["approvers"] == ["lead"]
    assert posted["id"] == f"{session}/interrupt/{interrupt.id}/escalated/1"
    assert posted["may_decide"] == ["alice", "lead"] and posted["text"].startswith(
        "Escalated to lead"
    )


async def test_signed_escalation_survives_a_new_worker(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    k = keys(tmp_path, "alice", "lead")
    lead = k["lead"][0]
    target = tmp_path / "out.txt"
    session = sid()
    config = script(
        steps(target),
        approvers=["alice"],
        approver_keys={"alice": k["alice"][1], "lead": k["lead"][1]},
        escalate=[{"after_s": STEP_S + 1, "approvers": ["lead"]}],
    )
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        [interrupt] = waiting.interrupts
        with pytest.raises(RequestRejected, match="only once it escalates to them"):
            await keel.decide(session, interrupt.id, "approve", approver="lead", key=lead)
    # no worker for a while: the step's timer is Temporal's, and a new worker takes it up
    await asyncio.sleep(0.5)
    async with run_worker():
        later = await escalated(keel, session)
        assert STEP_S + 1 <= waited(later) < STEP_S + 10
        with pytest.raises(RequestRejected, match="is not signed"):
            await keel.decide(session, interrupt.id, "approve", approver="lead")
        ack = await keel.decide(session, interrupt.id, "approve", approver="lead", key=lead)
        assert ack.status == "approved"
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "escalation_signed_new_worker")
    assert done.status == "completed" and target.read_text().splitlines() == ["v"]
    [decided] = [e for e in state.events if e.type == "interrupt_decided"]
    assert decided.detail["by"] == "lead" and decided.detail["key"]


async def test_a_step_comes_on_time_in_the_run_after_a_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("e1", "echo", text="warm up"), stop="tool_use"),
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ],
        approvers=["alice"],
        escalate=[{"after_s": STEP_S + 1, "approvers": ["lead"]}],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        [interrupt] = waiting.interrupts
        for _ in range(100):  # the parked session moves to a new run while it waits
            if (await keel.state(session, include_messages=False)).run > 1:
                break
            await asyncio.sleep(0.1)
        later = await escalated(keel, session)
        assert (await keel.state(session, include_messages=False)).run > 1
        assert STEP_S + 1 <= waited(later) < STEP_S + 10
        await keel.decide(session, interrupt.id, "approve", approver="lead")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "escalation_across_continue_as_new")
    assert done.status == "completed" and target.read_text().splitlines() == ["v"]
    assert [e.type for e in state.events].count("interrupt_escalated") == 1


async def test_the_approval_timeout_stays_the_last_word(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    session = sid()
    config = script(
        steps(target),
        escalate=[{"after_s": 1, "approvers": ["lead"]}, {"after_s": 2, "approvers": ["boss"]}],
        approval_timeout_s=3,
    )
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        [interrupt] = waiting.interrupts
        assert interrupt.may_decide == [] and interrupt.next_approvers == ["lead"]
        with pytest.raises(RequestRejected, match="only once it escalates"):
            await keel.decide(session, interrupt.id, "approve", approver="boss")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30, through_interrupts=True)
        state = await keel.state(session)
    await save_history(keel.client, session, "escalation_then_timeout")
    assert done.status == "completed" and not target.exists()
    kinds = [e.type for e in state.events if e.type.startswith("interrupt_")]
    assert kinds == [
        "interrupt_created",
        "interrupt_escalated",
        "interrupt_escalated",
        "interrupt_decided",
    ]
    assert state.events[-1].type != "interrupt_escalated"
    [closed] = [e for e in state.events if e.type == "interrupt_decided"]
    assert closed.detail["status"] == "timed_out"


async def test_a_sub_agents_approval_escalates_in_its_parent_too(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """The child's session keeps the timer (its parent's steps); the parent shows the step,
    tells its own URLs, and the escalation approver decides through the parent."""
    target = tmp_path / "w.txt"
    writer = script(steps(target))
    session = sid()
    with receiver() as hook:
        parent = script(
            [
                respond(tool_use("w1", "writer", prompt="write it"), stop="tool_use"),
                respond(text("all done")),
            ],
            agents={"writer": SubAgent(description="Writes.", config=writer)},
            approvers=["alice"],
            escalate=[{"after_s": STEP_S, "approvers": ["lead"]}],
            notify=[hook.url],
        )
        async with run_worker():
            ack = await keel.prompt(session, "go", config=parent)
            [posted] = await hook.arrival(1)
            iid = posted.event["interrupt"]
            with pytest.raises(RequestRejected, match="only once it escalates to them"):
                await keel.decide(session, iid, "approve", approver="lead")
            later = await escalated(keel, session)
            assert later.id == iid and later.may_decide == ["alice", "lead"]
            await hook.arrival(2)
            await keel.decide(session, iid, "approve", approver="lead")
            done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
            await hook.arrival(3)
            state = await keel.state(session)
        await save_history(keel.client, session, "escalation_sub_agent")
    assert done.status == "completed" and target.read_text().splitlines() == ["v"]
    assert [e["event"] for e in hook.events()] == ["interrupt", "interrupt_escalated", "turn_ended"]
    [shown] = [e for e in state.events if e.type == "interrupt_escalated"]
    assert shown.detail["approvers"] == ["lead"]


# ------------------------------------------------------------------------------ the rules


def test_escalation_steps_are_checked() -> None:
    base: dict[str, Any] = {"model": "scripted:x.json", "approvers": ["alice"]}
    cases = [
        ([{"after_s": 0, "approvers": ["lead"]}], "greater than 0"),
        ([{"after_s": 5, "approvers": []}], "at least 1"),
        (
            [{"after_s": 5, "approvers": ["lead"]}, {"after_s": 5, "approvers": ["boss"]}],
            "increasing time",
        ),
        ([{"after_s": 5, "approvers": ["alice"]}], "already one of the session's approvers"),
        (
            [{"after_s": 5, "approvers": ["lead"]}, {"after_s": 9, "approvers": ["lead"]}],
            "more than one step",
        ),
    ]
    for escalate, problem in cases:
        with pytest.raises(ValidationError, match=problem):
            SessionConfig(**base, escalate=escalate)
    with pytest.raises(ValidationError, match="at or after the approval timeout"):
        SessionConfig(
            **base, approval_timeout_s=5, escalate=[{"after_s": 5, "approvers": ["lead"]}]
        )
    with pytest.raises(ValidationError, match="'lead' has no approver key"):
        SessionConfig(
            **base,
            approver_keys={"alice": "ed25519:x"},
            escalate=[{"after_s": 5, "approvers": ["lead"]}],
        )


async def test_a_start_with_an_unsigned_escalation_approver_fails_the_session(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A client that skips validation: the workflow refuses the settings at start."""
    k = keys(tmp_path, "alice")
    config = script(steps(tmp_path / "out.txt"), approver_keys={"alice": k["alice"][1]})
    raw = config.model_dump(mode="json")
    raw["escalate"] = [{"after_s": 5, "approvers": ["lead"]}]
    session = sid()
    async with run_worker():
        await keel.client.start_workflow(
            "AgentSession", {"config": raw}, id=session, task_queue=keel.task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await keel.client.get_workflow_handle(session).result()
    assert "'lead' has no approver key" in str(failed.value.cause)


def _parent(**more: Any) -> SessionConfig:
    return SessionConfig(model="scripted:x.json", approvers=["alice"], **more)


def test_a_sub_agent_keeps_its_parents_steps_and_may_not_widen_them() -> None:
    parent = _parent(escalate=[{"after_s": 60, "approvers": ["lead"]}])
    child = SessionConfig(model="scripted:y.json")
    assert child_config(parent, child, "c").escalate == [
        EscalationStep(after_s=60, approvers=["lead"])
    ]
    later = SessionConfig(
        model="scripted:y.json", escalate=[{"after_s": 90, "approvers": ["lead"]}]
    )
    assert child_config(parent, later, "c").escalate[0].after_s == 90  # stricter: later
    sooner = SessionConfig(
        model="scripted:y.json", escalate=[{"after_s": 5, "approvers": ["lead"]}]
    )
    assert child_config(parent, sooner, "c").escalate[0].after_s == 60  # never sooner
    added = SessionConfig(model="scripted:y.json", escalate=[{"after_s": 5, "approvers": ["eve"]}])
    with pytest.raises(InputRejected, match="escalates to 'eve', whom its parent never lets"):
        child_config(parent, added, "c")
    with pytest.raises(InputRejected, match="escalates to 'eve'"):
        child_config(_parent(), added, "c")  # a parent without escalation
    # the parent's approvers decide from the start; a child may hold one back until a step
    held = SessionConfig(
        model="scripted:y.json",
        approvers=["alice"],
        escalate=[{"after_s": 5, "approvers": ["bob"]}],
    )
    both = _parent().model_copy(update={"approvers": ["alice", "bob"]})
    assert child_config(both, held, "c").escalate[0].approvers == ["bob"]


def test_a_sub_agent_keeps_its_escalation_approvers_keys() -> None:
    keys_ = {"alice": "ed25519:a", "lead": "ed25519:l", "eve": "ed25519:e"}
    parent = SessionConfig.model_construct(
        **{
            **_parent().model_dump(),
            "approver_keys": keys_,
            "escalate": [EscalationStep(after_s=60, approvers=["lead"])],
        }
    )
    child = SessionConfig(model="scripted:y.json", approvers=["alice"])
    made = child_config(parent, child, "c")
    assert made.approver_keys == {"alice": "ed25519:a", "lead": "ed25519:l"}
    narrowed = SessionConfig(
        model="scripted:y.json", approvers=["alice"], approver_keys={"alice": "ed25519:a"}
    )
    with pytest.raises(InputRejected, match="'lead' has no approver key"):
        child_config(parent, narrowed, "c")
    # and in a parent's own settings, checked as its session will be
    agent = SubAgent(description="d", config=child)
    assert agent.config.escalate == []


def test_the_escalate_flag_is_read_and_checked() -> None:
    from keel.worker.cli.run_inputs import UsageError, escalation_steps

    assert escalation_steps(["30:lead", "90.5:boss, cto"]) == [
        EscalationStep(after_s=30, approvers=["lead"]),
        EscalationStep(after_s=90.5, approvers=["boss", "cto"]),
    ]
    for bad in ("30", "x:lead", "0:lead", "-1:lead", "inf:lead", "30:", "30: ,"):
        with pytest.raises(UsageError, match="--escalate"):
            escalation_steps([bad])


def _refund_interrupt() -> Interrupt:
    return Interrupt(
        id="i1",
        tool_use={"toolUseId": "t1", "name": "refund", "input": {}},
        name="refund",
        reason="r",
        turn=1,
    )


def test_keel_pending_and_the_page_say_who_decides_and_the_next_step() -> None:
    from keel.worker.cli.console import escalation_lines, interrupt_json
    from keel.worker.ui.views import interrupts
    from keel.workflows.escalation import escalate, started

    config = _parent(
        escalate=[{"after_s": 60, "approvers": ["lead"]}, {"after_s": 120, "approvers": ["boss"]}]
    )
    interrupt = _refund_interrupt()
    assert escalation_lines(interrupt) == [] and "may_decide" not in interrupt_json(interrupt)
    opened = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    started(config, interrupt, opened)
    assert escalation_lines(interrupt) == [
        "may decide: alice",
        "next step:  lead at 2026-01-01T00:01:00+00:00",
    ]
    escalate(config, interrupt, datetime.fromisoformat("2026-01-01T00:01:00+00:00"))
    assert interrupt_json(interrupt)["may_decide"] == ["alice", "lead"]
    assert interrupt_json(interrupt)["next_escalation"] == {
        "at": "2026-01-01T00:02:00+00:00",
        "approvers": ["boss"],
    }
    [view] = interrupts([interrupt])
    assert view.may_decide == "alice, lead"
    assert view.next_step == "boss at 2026-01-01T00:02:00+00:00"


def test_a_step_never_reads_as_come_before_it_was_due() -> None:
    """A query replay whose last task has not started sees the timer with the older clock."""
    from keel.workflows.escalation import escalate, started

    config = _parent(escalate=[{"after_s": 4, "approvers": ["lead"]}])
    interrupt = _refund_interrupt()
    opened = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    started(config, interrupt, opened)
    escalate(config, interrupt, opened)  # the clock of the task that opened it
    assert interrupt.escalated_at == "2026-01-01T00:00:04+00:00"
    assert waited(interrupt) == 4


def test_keel_watch_and_run_show_the_step() -> None:
    from keel.worker.cli.follow import event_details, progress_line
    from keel.workflows.contracts import Event

    event = Event(
        seq=7,
        type="interrupt_escalated",
        at="2026-01-01T00:01:00+00:00",
        turn=1,
        detail={"id": "i1", "kind": "approval", "step": 1, "approvers": ["lead"], "next_at": None},
    )
    assert event_details(event) == "i1 escalated to lead (step 1)"
    assert progress_line(event) == "interrupt i1 escalated to lead (step 1)"
