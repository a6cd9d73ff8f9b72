"""Budgets that pause: a turn at a cap asks a person for more, or ends when denied.

The scripted model reports its usage (``respond(..., tokens=N)``: N in, N out); a ``record``
tool writes a line each time it runs, so a repeated run would show.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from keel import AgentSession, KeelClient, RequestRejected
from keel.worker.signing import ApproverKey, generate_key
from keel.workflows.contracts import Decision, Interrupt
from keel.workflows.standing import signed_value
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history
from tests.helpers.webhooks import receiver


def sid() -> str:
    return f"bg-{uuid.uuid4().hex[:10]}"


def loop(ledger: Path, calls: int, tokens: int = 5) -> list[dict[str, Any]]:
    """``calls`` model calls that each run ``record`` once, then an answer."""
    out = [
        respond(
            tool_use(f"r{i}", "record", path=str(ledger), value=f"line {i}"),
            stop="tool_use",
            tokens=tokens,
        )
        for i in range(calls)
    ]
    return [*out, respond(text("all done"), tokens=tokens)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def parked_on_budget(keel: KeelClient, session: str) -> Interrupt:
    pending = await keel.pending(session)
    [interrupt] = pending.interrupts
    assert interrupt.kind == "budget", interrupt
    return interrupt


async def test_a_cycle_cap_parks_and_an_approval_grants_as_much_again(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    config = script(loop(ledger, 3), max_cycles_per_turn=2)
    async with run_worker():
        record = await keel.run(session, "go", config=config, timeout_s=30)
        assert record.status == "awaiting_human" and record.cycles == 2
        interrupt = await parked_on_budget(keel, session)
        assert interrupt.tool_use.input == {"cap": "cycles", "spent": 2, "limit": 2}
        assert "turn reached its budget of 2 model calls" in interrupt.reason
        assert lines(ledger) == ["line 0", "line 1"] and len(model_log()) == 2
        await keel.decide(session, interrupt.id, "approve", approver="ops")
        done = await keel.wait_turn(session, 1, timeout_s=30)
    # two more calls allowed: the third tool call and the answer; nothing ran twice
    assert done.status == "completed", done
    assert done.cycles == 4 and done.allowance == {"cycles": 2}
    assert lines(ledger) == ["line 0", "line 1", "line 2"]
    assert len(model_log()) == 4
    await save_history(keel.client, session, "budget_cycles_approved")


async def test_deny_ends_the_turn_with_the_cap(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    async with run_worker():
        await keel.run(session, "go", config=script(loop(ledger, 3), max_cycles_per_turn=1))
        interrupt = await parked_on_budget(keel, session)
        await keel.decide(session, interrupt.id, "deny", reason="enough", approver="ops")
        done = await keel.wait_turn(session, 1, timeout_s=30)
    assert done.status == "failed" and done.stop_reason == "max_cycles"
    assert done.error is not None and "turn reached its budget of 1 model calls" in done.error
    assert "denied by ops: enough" in done.error
    assert lines(ledger) == ["line 0"]
    await save_history(keel.client, session, "budget_denied")


async def test_a_restart_while_parked_on_a_budget(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    async with run_worker():
        record = await keel.run(
            session, "go", config=script(loop(ledger, 2), max_cycles_per_turn=1), timeout_s=30
        )
        assert record.status == "awaiting_human"
        interrupt = await parked_on_budget(keel, session)
    # the worker is gone; a new one takes the session from its history
    async with run_worker():
        await keel.decide(session, interrupt.id, "approve", approver="ops", extend=5)
        done = await keel.wait_turn(session, 1, timeout_s=30)
    assert done.status == "completed" and done.cycles == 3
    assert lines(ledger) == ["line 0", "line 1"] and len(model_log()) == 3
    await save_history(keel.client, session, "budget_restart_extend")


async def test_the_turn_token_cap_grants_what_extend_says(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    # 20 tokens a call: the cap of 30 is reached after two calls
    config = script(loop(ledger, 4, tokens=10), max_turn_tokens=30)
    async with run_worker():
        await keel.run(session, "go", config=config, timeout_s=30)
        first = await parked_on_budget(keel, session)
        assert first.tool_use.input == {"cap": "turn_tokens", "spent": 40, "limit": 30}
        await keel.decide(session, first.id, "approve", approver="ops", extend=20)
        # 40 spent of 50: one more call (60), then it asks again
        record = await keel.wait_turn(session, 1, timeout_s=30)
        assert record.status == "awaiting_human"
        second = await parked_on_budget(keel, session)
        assert second.id != first.id
        assert second.tool_use.input == {"cap": "turn_tokens", "spent": 60, "limit": 50}
        with pytest.raises(RequestRejected, match="extend only approves a budget|deny"):
            await keel.decide(session, second.id, "deny", approver="ops", extend=5)
        await keel.decide(session, second.id, "approve", approver="ops", extend=100)
        done = await keel.wait_turn(session, 1, timeout_s=30)
    assert done.status == "completed" and done.cycles == 5
    assert done.allowance == {"turn_tokens": 120}


async def test_a_session_budget_raised_later_lets_the_parked_turn_go_on(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    config = script(
        [
            respond(text("one"), tokens=10),  # 20 tokens
            respond(tool_use("t", "record", path=str(ledger), value="x"), stop="tool_use"),
            respond(text("two"), tokens=10),
        ],
        max_session_tokens=20,
    )
    async with run_worker():
        first = await keel.run(session, "first", config=config, timeout_s=30)
        assert first.status == "completed"
        # over the session's budget: the prompt is taken, and its turn asks at once
        second = await keel.run(session, "second", timeout_s=30)
        assert second.status == "awaiting_human" and second.cycles == 0
        interrupt = await parked_on_budget(keel, session)
        assert interrupt.tool_use.input["cap"] == "session_tokens"
        ack = await keel.budget(session, tokens=1_000, by="ops")
        assert ack.tokens == 1_000
        done = await keel.wait_turn(session, 2, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed", done
    assert [i.status for i in state.turns[1].interrupts] == []
    assert lines(ledger) == ["x"]
    await save_history(keel.client, session, "budget_raised")


async def test_on_budget_fail_ends_at_the_cap(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    config = script(loop(ledger, 3), max_cycles_per_turn=1, on_budget="fail")
    async with run_worker():
        record = await keel.run(sid(), "go", config=config, timeout_s=30)
    assert record.status == "failed" and record.stop_reason == "max_cycles"
    assert record.error == "turn reached its budget of 1 model calls"


async def test_a_budget_update_by_someone_not_an_approver_is_refused(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    session = sid()
    config = script([respond(text("hi"))], approvers=["ops"], max_session_tokens=100)
    async with run_worker():
        await keel.run(session, "hi", config=config, timeout_s=30)
        with pytest.raises(RequestRejected, match="'mallory' is not an approver"):
            await keel.budget(session, tokens=500, by="mallory")
        with pytest.raises(RequestRejected, match="names tokens, cost_usd or both"):
            await keel.budget(session, by="ops")
        ack = await keel.budget(session, tokens=500, by="ops")
    assert ack.tokens == 500


async def test_a_signed_grant_covers_its_amount(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    public = generate_key(tmp_path / "alice.key")
    alice = ApproverKey.load(tmp_path / "alice.key")
    session = sid()
    config = script(loop(ledger, 3), max_cycles_per_turn=1, approver_keys={"alice": public})
    async with run_worker():
        await keel.run(session, "go", config=config, timeout_s=30)
        interrupt = await parked_on_budget(keel, session)
        # alice signed a grant of 1 more call; the same signature on a grant of 50 is refused
        one = Decision(interrupt_id=interrupt.id, decision="approve", approver="alice", extend=1)
        signature = alice.sign_for(
            interrupt,
            namespace=keel.client.namespace,
            session_id=session,
            kind="decide",
            what=signed_value(one),
            reason=None,
            approver="alice",
        )
        forged = one.model_copy(update={"extend": 50, "signature": signature})
        with pytest.raises(RequestRejected, match="does not verify"):
            await keel._update(session, AgentSession.decide, forged)
        await keel.decide(session, interrupt.id, "approve", approver="alice", key=alice, extend=1)
        record = await keel.wait_turn(session, 1, timeout_s=30)
    assert record.status == "awaiting_human" and record.cycles == 2


async def test_a_cost_cap_asks_and_names_the_dollars(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    # $1,000 per million tokens, 20 tokens a call: $0.02 a call; the cap of $0.03 after two
    config = script(
        loop(ledger, 3, tokens=10),
        price={"input": 1000, "output": 1000},
        max_turn_cost_usd=0.03,
    )
    async with run_worker():
        record = await keel.run(session, "go", config=config, timeout_s=30)
        assert record.status == "awaiting_human" and record.cycles == 2
        interrupt = await parked_on_budget(keel, session)
        assert interrupt.tool_use.input["cap"] == "turn_cost"
        assert interrupt.tool_use.input["limit"] == 0.03
        assert "turn cost $0.0400 of its budget of $0.03" in interrupt.reason
        await keel.decide(session, interrupt.id, "approve", approver="ops", extend=1)
        done = await keel.wait_turn(session, 1, timeout_s=30)
    assert done.status == "completed" and done.cycles == 4
    assert done.cost_usd is not None and abs(done.cost_usd - 0.08) < 1e-9
    await save_history(keel.client, session, "budget_cost")


async def test_a_job_at_its_cap_notifies_a_person(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """An overnight job parks on its budget and says so to its notify URL, with the command."""
    ledger = tmp_path / "ledger.txt"
    session = sid()
    with receiver() as hook:
        config = script(loop(ledger, 3), max_cycles_per_turn=1, notify=[hook.url])
        async with run_worker():
            record = await keel.run(session, "go", config=config, timeout_s=30)
            assert record.status == "awaiting_human"
            [posted] = await hook.arrival(1)
            event = posted.event
            assert event["event"] == "interrupt" and event["kind"] == "budget"
            assert event["input"] == {"cap": "cycles", "spent": 1, "limit": 1}
            assert event["command"] == f"keel approve {session} {record.interrupts[0].id}"
            assert "turn reached its budget of 1 model calls" in event["reason"]
            await keel.decide(session, record.interrupts[0].id, "approve", approver="ops")
            # one more call granted; then the cap again, and a second notice
            first, second = await hook.arrival(2)
            again = await keel.wait_turn(session, 1, timeout_s=30)
    assert again.status == "awaiting_human" and again.cycles == 2
    assert second.event["kind"] == "budget" and second.event["interrupt"] != event["interrupt"]
    assert second.event["input"] == {"cap": "cycles", "spent": 2, "limit": 2}
