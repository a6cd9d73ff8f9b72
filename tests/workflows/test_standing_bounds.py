"""Bounded standing approvals (issue 44): they run out by uses, by time and by total.

Against the dev server: an approval past a bound covers no more calls (the next asks a person)
and ends with ``standing_approval_exhausted``; ``policy`` shows what is left. The bounds are
signed on signed sessions: a captured signature cannot add, drop or change them, sent through
``KeelClient``, raw temporalio updates or the raw ``temporal`` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, RequestRejected, TurnRecord
from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import (
    Condition,
    Decision,
    Interrupt,
    SessionConfig,
    StandingApproval,
)
from keel.workflows.inheritance import inherited_standing
from keel.workflows.signing import SIGNING_V2, BadSignature, approval_message, verify
from keel.workflows.standing import check_standing, signed_value
from keel.workflows.standing_bounds import count, describe_left, fits, left
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history, temporal_cli
from tests.workflows.test_signed_approvals import keys
from tests.workflows.test_standing_approvals import gated, parked

RECORDING = os.environ.get("KEEL_RECORD_HISTORIES") == "1"
AMOUNT_100 = Condition(field="amount", op="<=", value=100)


def sid(name: str) -> str:
    """The session id: the history's name when recording (replay runs it under that id)."""
    return name if RECORDING else f"sb-{uuid.uuid4().hex[:10]}"


def transfers(*amounts: Any) -> list[dict[str, Any]]:
    """A model that sends one transfer per cycle, then says done."""
    calls = [
        respond(tool_use(f"t{i}", "transfer", amount=a, to="bob"), stop="tool_use")
        for i, a in enumerate(amounts)
    ]
    return [*calls, respond(text("done"))]


async def next_ask(keel: KeelClient, session: str, turn: int, after: str | None) -> Interrupt:
    """The pending interrupt after ``after`` was decided (one call asks at a time here)."""
    for _ in range(150):
        record = await keel.turn(session, turn)
        waiting = [i for i in record.interrupts if i.id != after]
        if waiting:
            return waiting[0]
        assert record.status in ("running", "awaiting_human"), record
        await asyncio.sleep(0.1)
    raise AssertionError(f"{session} turn {turn} did not ask again")


def bounded_types(state_events: list[Any]) -> list[str]:
    return [e.type for e in state_events if e.type.startswith("standing_")]


# ----------------------------------------------------------------------------- pure


def test_bounds_are_signed_only_when_set_and_any_change_is_another_message() -> None:
    plain = Decision(interrupt_id="i", decision="approve", always=True)
    assert signed_value(plain) == {"decision": "approve", "always": True, "when": []}
    bounded = plain.model_copy(update={"max_uses": 2, "for_s": 90.0, "total": AMOUNT_100})
    assert signed_value(bounded) == {
        "decision": "approve",
        "always": True,
        "when": [],
        "max_uses": 2,
        "for_s": 90,
        "total": {"field": "amount", "op": "<=", "value": 100},
    }
    variants = [
        plain,
        bounded,
        bounded.model_copy(update={"max_uses": 3}),
        bounded.model_copy(update={"max_uses": None}),
        bounded.model_copy(update={"for_s": 91.0}),
        bounded.model_copy(update={"total": Condition(field="amount", op="<=", value=1000)}),
        bounded.model_copy(update={"total": Condition(field="fee", op="<=", value=100)}),
    ]
    messages = {json.dumps(signed_value(d), sort_keys=True) for d in variants}
    assert len(messages) == len(variants)
    # an unbounded decision serializes as before bounds (an older worker reads it)
    assert "max_uses" not in plain.model_dump(mode="json")


def test_a_signature_without_bounds_does_not_verify_bounds_and_back(tmp_path: Path) -> None:
    alice = keys(tmp_path, "alice")["alice"]
    interrupt = Interrupt(
        id="i1",
        kind="approval",
        tool_use={"toolUseId": "u", "name": "transfer", "input": {"amount": 5}},
        name="transfer",
        reason="r",
        turn=1,
        signing=SIGNING_V2,
    )
    plain = Decision(interrupt_id="i1", decision="approve", approver="alice", always=True)
    bounded = plain.model_copy(update={"max_uses": 2})

    def message(d: Decision) -> bytes:
        return approval_message(
            interrupt,
            namespace="default",
            session_id="s",
            kind="decide",
            what=signed_value(d),
            reason=None,
            approver="alice",
        )

    def signature(d: Decision) -> str:
        return alice[0].sign_for(
            interrupt,
            namespace="default",
            session_id="s",
            kind="decide",
            what=signed_value(d),
            reason=None,
            approver="alice",
        )

    verify(alice[1], message(plain), signature(plain))
    verify(alice[1], message(bounded), signature(bounded))
    for signed, sent in ((plain, bounded), (bounded, plain)):
        with pytest.raises(BadSignature):
            verify(alice[1], message(sent), signature(signed))


def test_bounds_need_always_and_a_total_is_a_numeric_limit() -> None:
    for bound in ({"max_uses": 1}, {"for_s": 5.0}, {"total": AMOUNT_100}):
        with pytest.raises(InputRejected, match=f"{next(iter(bound))} needs always"):
            check_standing(Decision(interrupt_id="i", decision="approve", **bound), None)
    for op, value in ((">=", 10), ("==", 10), ("<=", "10"), ("<=", 0), ("<=", True)):
        total = Condition(field="amount", op=op, value=value)
        with pytest.raises(InputRejected, match="total"):
            check_standing(
                Decision(interrupt_id="i", decision="approve", always=True, total=total), None
            )


def test_a_total_covers_numbers_that_fit_and_nothing_else() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    approval = StandingApproval(
        tool="transfer",
        interrupt_id="i",
        turn=1,
        total=AMOUNT_100,
        max_uses=5,
        expires_at=(now + timedelta(seconds=60)).isoformat(),
    )
    for garbage in ({"amount": "10"}, {"amount": True}, {"amount": -5}, {}, {"amount": None}):
        assert fits(approval, garbage, now) is None, garbage
    assert fits(approval, {"amount": 60}, now) == 60
    assert count(approval, 60) is None
    assert fits(approval, {"amount": 50}, now) is None  # 110 > 100
    assert fits(approval, {"amount": 40}, now) == 40
    assert left(approval, now) == {"uses_left": 4, "expires_in_s": 60.0, "total_left": 40.0}
    assert describe_left(approval, now) == (
        "4 of 5 uses left, expires in 60 s, 40 of amount <= 100 left"
    )
    assert count(approval, 40) == "amount totals 100 of 100"
    assert fits(approval, {"amount": 1}, now + timedelta(seconds=61)) is None


# ----------------------------------------------------------------------------- sessions


async def test_a_standing_approval_runs_out_by_uses(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """max_uses 3: turn 1 uses one (2 left, shown by policy); turn 2 uses two more, the next
    call asks; the approval is gone."""
    out = tmp_path / "out.txt"
    steps = [*gated("guarded_record", out, "1", "2"), *gated("guarded_record", out, *"3456")]
    session = sid("standing_max_uses")
    async with run_worker():
        first = await keel.prompt(session, "one", config=script(steps))
        asking = (await parked(keel, session, first.turn_id)).interrupts[0]
        await keel.decide(session, asking.id, "approve", always=True, max_uses=3)
        await keel.wait_turn(session, first.turn_id, timeout_s=30)
        [standing] = await keel.policy(session)
        assert (standing.max_uses, standing.uses) == (3, 1)
        second = await keel.prompt(session, "two")
        asks = (await parked(keel, session, second.turn_id)).interrupts
        assert [i.tool_use.input["value"] for i in asks] == ["5"]
        assert out.read_text().splitlines() == ["1", "2", "3", "4"]
        assert await keel.policy(session) == []
        await keel.decide(session, asks[0].id, "approve")
        sixth = await next_ask(keel, session, second.turn_id, asks[0].id)
        assert sixth.tool_use.input["value"] == "6"  # still asks: the approval ended
        await keel.decide(session, sixth.id, "deny", reason="enough")
        done = await keel.wait_turn(session, second.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "standing_max_uses")
    assert done.status == "completed"
    assert out.read_text().splitlines() == ["1", "2", "3", "4", "5"]
    assert bounded_types(state.events) == [
        "standing_approval_granted",
        *["standing_approval_used"] * 3,
        "standing_approval_exhausted",
    ]
    [ran_out] = [e for e in state.events if e.type == "standing_approval_exhausted"]
    assert ran_out.detail == {"tool": "guarded_record", "why": "used 3 of 3 time(s)"}


async def test_a_standing_approval_runs_out_by_time(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """for_s 4: a call within 4 s runs unasked; one after asks, and the approval ends.

    The expiry is checked against the moments the decision was sent and taken, not against
    when the turn ended: a loaded machine may end the turn after the approval ran out.
    """
    out = tmp_path / "out.txt"
    steps = [*gated("guarded_record", out, "1", "2"), *gated("guarded_record", out, "3")]
    session = sid("standing_for")
    async with run_worker():
        first = await keel.prompt(session, "one", config=script(steps))
        asking = (await parked(keel, session, first.turn_id)).interrupts[0]
        sent = datetime.now(UTC)
        await keel.decide(session, asking.id, "approve", always=True, for_s=4)
        taken = datetime.now(UTC)
        await keel.wait_turn(session, first.turn_id, timeout_s=30)
        [standing] = await keel.policy(session)
        assert standing.expires_at is not None
        expires = datetime.fromisoformat(standing.expires_at)
        assert sent + timedelta(seconds=3.9) <= expires <= taken + timedelta(seconds=4.1)
        await asyncio.sleep(max((expires - datetime.now(UTC)).total_seconds(), 0) + 0.5)
        second = await keel.prompt(session, "two")
        asks = (await parked(keel, session, second.turn_id)).interrupts
        assert [i.tool_use.input["value"] for i in asks] == ["3"]
        assert await keel.policy(session) == []
        await keel.decide(session, asks[0].id, "approve")
        done = await keel.wait_turn(session, second.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "standing_for")
    assert done.status == "completed"
    assert out.read_text().splitlines() == ["1", "2", "3"]
    assert bounded_types(state.events) == [
        "standing_approval_granted",
        "standing_approval_used",
        "standing_approval_exhausted",
    ]
    granted = next(e for e in state.events if e.type == "standing_approval_granted")
    assert granted.detail["expires_at"] == standing.expires_at


async def test_a_standing_approval_runs_out_by_total(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    """total amount <= 100: 60 runs; 50 would pass 100 and asks; a string, a negative and a
    missing amount ask; 40 runs and spends it all; then 1 asks."""
    steps = transfers(50, 60, 50, "5", -10, None, 40, 1)
    session = sid("standing_total")
    ran: list[Any] = []
    async with run_worker():
        config = script(steps, approval_tools=["transfer"])
        ack = await keel.prompt(session, "pay", config=config)
        asking = (await parked(keel, session, ack.turn_id)).interrupts[0]
        assert asking.tool_use.input["amount"] == 50
        await keel.decide(session, asking.id, "approve", always=True, total=AMOUNT_100)
        for expected in (50, "5", -10, None):
            asking = await next_ask(keel, session, ack.turn_id, asking.id)
            assert asking.tool_use.input.get("amount") == expected
            if expected == 50:
                [standing] = await keel.policy(session)
                assert standing.spent == 60 and standing.total == AMOUNT_100
            await keel.decide(session, asking.id, "deny", reason="asked, not covered")
        asking = await next_ask(keel, session, ack.turn_id, asking.id)
        assert asking.tool_use.input["amount"] == 1
        assert await keel.policy(session) == []
        await keel.decide(session, asking.id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "standing_total")
    assert done.status == "completed"
    for event in state.events:
        if event.type == "standing_approval_used":
            ran.append(event.detail["id"])
    assert ran == ["t1", "t6"]
    assert bounded_types(state.events)[-1] == "standing_approval_exhausted"
    [ran_out] = [e for e in state.events if e.type == "standing_approval_exhausted"]
    assert ran_out.detail["why"] == "amount totals 100 of 100"


async def test_approving_always_with_max_uses_approves_that_many_waiting(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Three calls wait in one cycle: always with max_uses 1 on one lets one other go."""
    out = tmp_path / "out.txt"
    steps = [
        respond(
            *(tool_use(v, "guarded_record", path=str(out), value=v) for v in ("a", "b", "c")),
            stop="tool_use",
        ),
        respond(text("done")),
    ]
    session = sid("unused")
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps))
        for _ in range(100):
            record: TurnRecord = await keel.turn(session, ack.turn_id)
            if len(record.interrupts) == 3:
                break
            await asyncio.sleep(0.1)
        first = record.interrupts[0]
        await keel.decide(session, first.id, "approve", always=True, max_uses=1)
        left_waiting = (await keel.pending(session)).interrupts
        assert len(left_waiting) == 1
        assert await keel.policy(session) == []
        await keel.decide(session, left_waiting[0].id, "deny", reason="one too many")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert len(out.read_text().splitlines()) == 2


async def test_bounds_without_always_are_refused_naming_the_field(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    session = sid("unused")
    async with run_worker():
        config = script(gated("guarded_record", tmp_path / "o.txt", "1"))
        ack = await keel.prompt(session, "go", config=config)
        asking = (await parked(keel, session, ack.turn_id)).interrupts[0]
        with pytest.raises(RequestRejected, match="max_uses needs always"):
            await keel.decide(session, asking.id, "approve", max_uses=2)
        handle = keel.client.get_workflow_handle(session)
        raw = {"interrupt_id": asking.id, "decision": "approve", "always": True, "max_uses": 0}
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("decide", raw)
        total = {"field": "amount", "op": ">", "value": 1}
        raw = {"interrupt_id": asking.id, "decision": "approve", "always": True, "total": total}
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update("decide", raw)
        assert "total: the operator must be <= or <" in str(failed.value.cause)
        for over, said in (({"max_uses": 10**7}, "max_uses is"), ({"for_s": 4e7}, "for_s is")):
            raw = {"interrupt_id": asking.id, "decision": "approve", "always": True, **over}
            with pytest.raises(WorkflowUpdateFailedError) as failed:
                await handle.execute_update("decide", raw)
            assert said in str(failed.value.cause), failed.value.cause
        await keel.decide(session, asking.id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"


async def test_a_captured_signed_bounded_approval_cannot_be_rebounded(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
) -> None:
    """Alice signs always with max_uses 1; her signature, with the bounds changed, dropped or
    added to a plain always, is refused (raw updates, a signal, the raw temporal CLI)."""
    k = keys(tmp_path, "alice")
    alice = k["alice"][0]
    out = tmp_path / "out.txt"
    config = script(
        gated("guarded_record", out, "1", "2", "3"),
        approvers=["alice"],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid("unused")
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        first = (await parked(keel, session, ack.turn_id)).interrupts[0]

        def raw(signed: Decision, **sent: Any) -> dict[str, Any]:
            signature = alice.sign_for(
                first,
                namespace="default",
                session_id=session,
                kind="decide",
                what=signed_value(signed),
                reason=None,
                approver="alice",
            )
            base = {"interrupt_id": first.id, "decision": "approve", "approver": "alice"}
            return {**base, "always": True, "signature": signature, **sent}

        once = Decision(
            interrupt_id=first.id, decision="approve", approver="alice", always=True, max_uses=1
        )
        plain = once.model_copy(update={"max_uses": None})
        forged = [
            raw(once, max_uses=100),  # changed
            raw(once),  # dropped
            raw(once, max_uses=1, for_s=3600),  # another added
            raw(plain, max_uses=1),  # added to a signature without bounds
        ]
        handle = keel.client.get_workflow_handle(session)
        for update in forged:
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("decide", update)
            await handle.signal("decide", update)  # logged and ignored
            cli = await temporal_cli(
                temporal_env,
                "workflow", "update", "execute", "-w", session, "--name", "decide",
                "--input", json.dumps(update),
            )  # fmt: skip
            assert cli.returncode != 0 and "does not verify" in cli.stderr, cli.stderr
        assert [i.id for i in (await keel.pending(session)).interrupts] == [first.id]
        # alice's own, as signed: one later call runs, the third asks
        await keel.decide(session, first.id, "approve", approver="alice", key=alice,
                          always=True, max_uses=1)  # fmt: skip
        third = await next_ask(keel, session, ack.turn_id, first.id)
        assert third.tool_use.input["value"] == "3"
        await keel.decide(session, third.id, "deny", approver="alice", key=alice)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert out.read_text().splitlines() == ["1", "2"]


def test_a_bounded_standing_approval_is_not_handed_to_a_sub_agent() -> None:
    """A child's copy would count its uses and total apart from its parent's: it asks."""
    config = SessionConfig(model="scripted:x")
    plain = StandingApproval(tool="t", granted_by="alice", interrupt_id="i1", turn=1)
    for bound in (
        {"max_uses": 2},
        {"expires_at": "2026-01-01T00:00:00+00:00"},
        {"total": AMOUNT_100},
    ):
        limited = plain.model_copy(update={"tool": "u", **bound})
        assert inherited_standing(config, [plain, limited]) == [plain]
