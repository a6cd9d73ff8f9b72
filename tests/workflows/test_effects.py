"""Effect classes: a call whose earlier attempt may have had its effect is settled, not guessed.

The crash itself is the fault harness's (tests/faults/test_effect_kills.py, worker processes
SIGKILLed at each kill point). Here the journal is written as a dead attempt leaves it, an
attempt that began the tool's body and never said how it ended, so each way of settling it
(a person's approve, deny or resolve; a reconcile function; an idempotent tool's re-run) and
each attack on the decision runs against a real session in seconds.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

import tests.fault_tools  # noqa: F401 - registers refund, refund_reconciled, lookup, effect
from keel import ConversationStore, Decision, Interrupt, KeelClient, SubAgent, TurnRecord
from keel.activities.effects_journal import EffectJournal
from keel.worker.signing import ApproverKey, generate_key
from keel.workflows.contracts import SessionConfig
from tests.fault_tools import read_attempts, read_effects, read_runs
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import raw_decide, save_history
from tests.workflows.test_session import no_dangling, result_texts

TOOLS = ["tests.fault_tools"]


def sid() -> str:
    return f"fx-{uuid.uuid4().hex[:10]}"


def crashed(store: ConversationStore, session: str, use_id: str) -> None:
    """Leave the journal as a worker SIGKILLed inside the tool's body leaves it."""
    EffectJournal(store.backend, f"{session}/{use_id}").start(1, "dead-host/4242")


def refund_script(script: Script, tool: str, where: Path, **config: Any) -> SessionConfig:
    return script(
        [
            respond(tool_use("r1", tool, directory=str(where), value="refund 20"), stop="tool_use"),
            respond(text("done")),
        ],
        tool_modules=TOOLS,
        **config,
    )


async def unknown_outcome(keel: KeelClient, session: str, turn: int) -> Interrupt:
    record: TurnRecord = await keel.wait_turn(session, turn, timeout_s=30)
    assert record.status == "awaiting_human", record
    [interrupt] = record.interrupts
    assert interrupt.kind == "outcome_unknown", interrupt
    return interrupt


async def decide(keel: KeelClient, session: str, decision: Decision) -> Any:
    handle = keel.client.get_workflow_handle(session)
    return await raw_decide(handle, "decide", decision)


async def test_a_write_tool_after_a_crash_asks_and_resolve_records_the_result(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    crashed(store, session, "r1")
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=refund_script(script, "refund", tmp_path))
        interrupt = await unknown_outcome(keel, session, ack.turn_id)
        assert interrupt.tool_use.name == "refund" and interrupt.name == "refund"
        assert "may or may not have had its effect" in interrupt.reason
        assert "dead-host/4242" in interrupt.reason and "without a result" in interrupt.reason
        assert read_runs(tmp_path) == []  # not run again blindly
        await decide(
            keel,
            session,
            Decision(interrupt_id=interrupt.id, decision="resolve", result="refund 20 was made"),
        )
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
        effects = await keel.client.get_workflow_handle(session).query("effects")
    await save_history(keel.client, session, "effect_resolved")
    assert done.status == "completed", done
    assert read_effects(tmp_path) == []  # a person said it happened: nothing ran
    assert result_texts(state.messages[2]) == [("r1", "success", "refund 20 was made")]
    [record] = effects["effects"]
    assert record["outcome"] == "resolved" and record["interrupt_id"] == interrupt.id
    assert [a["attempt"] for a in record["attempts"]] == [1]
    assert record["attempts"][0]["ended"] is None
    no_dangling(state.messages)


async def test_approve_runs_it_again_once_and_deny_tells_the_model(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    approved, denied = sid(), sid()
    crashed(store, approved, "r1")
    crashed(store, denied, "r1")
    ran, refused = tmp_path / "approved", tmp_path / "denied"
    async with run_worker():
        one = await keel.prompt(approved, "refund", config=refund_script(script, "refund", ran))
        two = await keel.prompt(denied, "refund", config=refund_script(script, "refund", refused))
        first = await unknown_outcome(keel, approved, one.turn_id)
        second = await unknown_outcome(keel, denied, two.turn_id)
        await keel.decide(approved, first.id, "approve", approver="alice")
        await keel.decide(denied, second.id, "deny", reason="refunded by hand", approver="bob")
        assert (await keel.wait_turn(approved, one.turn_id, timeout_s=30)).status == "completed"
        assert (await keel.wait_turn(denied, two.turn_id, timeout_s=30)).status == "completed"
        ran_state, denied_state = await keel.state(approved), await keel.state(denied)
        ran_effects = await keel.client.get_workflow_handle(approved).query("effects")
        denied_effects = await keel.client.get_workflow_handle(denied).query("effects")
    await save_history(keel.client, approved, "effect_approved_again")
    await save_history(keel.client, denied, "effect_denied")
    assert read_effects(ran) == ["refund 20"]  # once, as the person decided
    assert read_attempts(ran) == [("start", 2), ("effect", 2), ("done", 2)]  # ctx.attempt
    assert read_effects(refused) == []
    assert result_texts(ran_state.messages[2]) == [("r1", "success", "refunded refund 20")]
    [(_, status, said)] = result_texts(denied_state.messages[2])
    assert status == "error" and "may or may not have run" in said and "refunded by hand" in said
    assert "by bob" in said
    [ran_record], [denied_record] = ran_effects["effects"], denied_effects["effects"]
    assert ran_record["outcome"] == "retried" and ran_record["decided_by"] == "alice"
    assert [a["attempt"] for a in ran_record["attempts"]] == [1, 2]
    assert ran_record["attempts"][1]["ended"] == "returned"
    assert denied_record["outcome"] == "denied" and denied_record["decided_by"] == "bob"
    retried = [e for e in ran_state.events if e.type == "tool_retried"]
    assert [e.detail["attempt"] for e in retried] == [2], ran_state.events
    assert "without a result" in retried[0].detail["previous"]


async def test_reconcile_settles_it_without_a_person(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    happened, missing = sid(), sid()
    found, lost = tmp_path / "found", tmp_path / "lost"
    found.mkdir()
    (found / "keys.log").write_text(f"{happened}/r1\n")  # the effect is in the ledger
    crashed(store, happened, "r1")
    crashed(store, missing, "r1")
    async with run_worker():
        one = await keel.prompt(
            happened, "refund", config=refund_script(script, "refund_reconciled", found)
        )
        two = await keel.prompt(
            missing, "refund", config=refund_script(script, "refund_reconciled", lost)
        )
        first = await keel.wait_turn(happened, one.turn_id, timeout_s=30)
        second = await keel.wait_turn(missing, two.turn_id, timeout_s=30)
        states = [await keel.state(happened), await keel.state(missing)]
        effects = [
            await keel.client.get_workflow_handle(s).query("effects") for s in (happened, missing)
        ]
    await save_history(keel.client, happened, "effect_reconciled")
    assert first.status == second.status == "completed"
    assert first.interrupts == [] and second.interrupts == []  # nobody was asked
    assert read_effects(found) == []  # reconcile found it: not run again
    assert read_effects(lost) == ["refund 20"]  # reconcile found nothing: run again, once
    assert result_texts(states[0].messages[2]) == [
        ("r1", "success", "refunded refund 20 (found in the ledger)")
    ]
    assert [e["effects"][0]["outcome"] for e in effects] == ["reconciled", "retried"]


async def test_an_idempotent_tool_runs_again_unasked_and_a_finished_call_never_runs_again(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    again, finished = sid(), sid()
    crashed(store, again, "r1")
    # a finished call's journal, as a reset or a lost response leaves it
    journal = EffectJournal(store.backend, f"{finished}/r1")
    journal.end(journal.start(1, "gone/1"), "returned")
    journal.finish({"result": {"toolUseId": "r1", "content": [{"text": "refunded earlier"}]}})
    async with run_worker():
        one = await keel.prompt(
            again, "go", config=refund_script(script, "effect", tmp_path / "again")
        )
        two = await keel.prompt(
            finished, "go", config=refund_script(script, "refund", tmp_path / "finished")
        )
        assert (await keel.wait_turn(again, one.turn_id, timeout_s=30)).interrupts == []
        assert (await keel.wait_turn(finished, two.turn_id, timeout_s=30)).interrupts == []
        again_state, finished_state = await keel.state(again), await keel.state(finished)
        effects = await keel.client.get_workflow_handle(finished).query("effects")
    await save_history(keel.client, again, "effect_idempotent_retried")
    await save_history(keel.client, finished, "effect_recorded")
    assert read_effects(tmp_path / "again") == ["refund 20"]
    assert [e.type for e in again_state.events].count("tool_retried") == 1
    assert read_runs(tmp_path / "finished") == []  # the journal answered
    assert result_texts(finished_state.messages[2]) == [("r1", "success", "refunded earlier")]
    assert effects["effects"][0]["outcome"] == "recorded"


async def test_decisions_that_do_not_fit_an_unknown_outcome_are_refused(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    crashed(store, session, "r1")
    config = refund_script(script, "refund", tmp_path, approvers=["alice"])
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=config)
        interrupt = await unknown_outcome(keel, session, ack.turn_id)
        attacks = {
            "no result": Decision(interrupt_id=interrupt.id, decision="resolve", approver="alice"),
            "a result on approve": Decision(
                interrupt_id=interrupt.id, decision="approve", result="x", approver="alice"
            ),
            "standing": Decision(
                interrupt_id=interrupt.id, decision="approve", always=True, approver="alice"
            ),
            "off the list": Decision(
                interrupt_id=interrupt.id, decision="resolve", result="x", approver="mallory"
            ),
            "nobody": Decision(interrupt_id=interrupt.id, decision="resolve", result="x"),
            "an unknown id": Decision(
                interrupt_id="forged", decision="resolve", result="x", approver="alice"
            ),
        }
        refusals = {}
        for name, attack in attacks.items():
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await decide(keel, session, attack)
            refusals[name] = str(caught.value.cause)
        # a signal carrying the same is ignored, not applied
        handle = keel.client.get_workflow_handle(session)
        await handle.signal("decide", attacks["off the list"])
        assert (await keel.pending(session)).interrupts[0].status == "pending"
        await decide(
            keel,
            session,
            Decision(interrupt_id=interrupt.id, decision="resolve", result="ok", approver="alice"),
        )
        twice = Decision(
            interrupt_id=interrupt.id, decision="resolve", result="2", approver="alice"
        )
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await decide(keel, session, twice)
        assert "no longer pending" in str(caught.value.cause)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert "resolve needs the tool's result" in refusals["no result"]
    assert "recorded with resolve" in refusals["a result on approve"]
    assert "cannot stand" in refusals["standing"]
    assert "'mallory' is not an approver" in refusals["off the list"]
    assert "names none" in refusals["nobody"]
    assert "unknown interrupt id" in refusals["an unknown id"]
    assert done.status == "completed"
    assert result_texts(state.messages[2]) == [("r1", "success", "ok")]
    assert read_effects(tmp_path) == []


async def test_resolve_does_not_decide_an_approval(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    config = script(
        [
            respond(
                tool_use("g1", "guarded_effect", directory=str(tmp_path), value="v"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        tool_modules=TOOLS,
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        [approval] = record.interrupts
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await decide(
                keel, session, Decision(interrupt_id=approval.id, decision="resolve", result="x")
            )
        assert "resolve does not decide it" in str(caught.value.cause)
        assert (await keel.pending(session)).interrupts[0].status == "pending"
        await keel.decide(session, approval.id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert read_effects(tmp_path) == ["v"]


async def test_keel_effects_lists_every_journaled_call_with_its_attempts(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    crashed(store, session, "i1")
    where = str(tmp_path)
    config = script(
        [
            respond(
                tool_use("w1", "refund", directory=where, value="a"),
                tool_use("l1", "lookup", directory=where, value="b"),
                tool_use("i1", "effect", directory=where, value="c"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        tool_modules=TOOLS,
    )
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        assert (await keel.wait_turn(session, ack.turn_id, timeout_s=30)).status == "completed"
        listed = await keel.effects(session)
        raw = await keel.client.get_workflow_handle(session).query("effects")
    assert [(r.tool, r.effect, r.outcome) for r in listed] == [
        ("refund", "write", "done"),
        ("effect", "idempotent", "retried"),
    ]
    assert [(a.attempt, a.ended) for a in listed[0].attempts] == [(1, "returned")]
    assert [(a.attempt, a.ended) for a in listed[1].attempts] == [(1, None), (2, "returned")]
    assert listed[0].idempotency_key == f"{session}/w1"
    # the session itself records only the call that was not plain
    assert [r["tool_use_id"] for r in raw["effects"]] == ["i1"]
    classes = raw["classes"]
    assert classes["refund"] == "write" and classes["effect"] == "idempotent"
    assert "lookup" not in classes  # read tools are not journaled


async def test_a_signed_session_takes_only_a_resolve_signed_for_its_result(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    crashed(store, session, "r1")
    public = generate_key(tmp_path / "alice.key")
    alice = ApproverKey.load(tmp_path / "alice.key")
    config = refund_script(script, "refund", tmp_path, approver_keys={"alice": public})

    def signed(interrupt: Interrupt, result: str, sent: str | None = None) -> Decision:
        what = {"decision": "resolve", "result": result}
        signature = alice.sign_for(
            interrupt,
            namespace=keel.client.namespace,
            session_id=session,
            kind="decide",
            what=what,
            reason=None,
            approver="alice",
        )
        return Decision(
            interrupt_id=interrupt.id,
            decision="resolve",
            result=result if sent is None else sent,
            approver="alice",
            signature=signature,
        )

    async with run_worker():
        ack = await keel.prompt(session, "refund", config=config)
        interrupt = await unknown_outcome(keel, session, ack.turn_id)
        refusals = []
        for attack in (
            Decision(interrupt_id=interrupt.id, decision="resolve", result="x", approver="alice"),
            signed(interrupt, "refund 20 failed", sent="refund 20 went through"),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await decide(keel, session, attack)
            refusals.append(str(caught.value.cause))
        await decide(keel, session, signed(interrupt, "refund 20 failed"))
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert "it is not signed" in refusals[0]
    assert "does not verify" in refusals[1]
    assert done.status == "completed"
    assert result_texts(state.messages[2]) == [("r1", "success", "refund 20 failed")]
    decided = [e.detail for e in state.events if e.type == "interrupt_decided"]
    assert [(d["status"], d["by"]) for d in decided] == [("resolved", "alice")], decided
    assert decided[0]["key"] == alice.fingerprint


async def test_nobody_deciding_in_time_does_not_run_it_again(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    crashed(store, session, "r1")
    config = refund_script(script, "refund", tmp_path, approval_timeout_s=1)
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=config)
        for _ in range(300):  # the approval timeout (1 s) closes it; the turn goes on
            done = await keel.turn(session, ack.turn_id)
            if done.status == "completed":
                break
            await asyncio.sleep(0.05)
        state = await keel.state(session)
        [record] = await keel.effects(session)
    assert done.status == "completed", done
    decided = [e.detail for e in state.events if e.type == "interrupt_decided"]
    assert [d["status"] for d in decided] == ["timed_out"], decided
    [(_, status, said)] = result_texts(state.messages[2])
    assert status == "error" and "nobody decided in time" in said
    assert read_runs(tmp_path) == []
    assert record.outcome == "unknown"


async def test_a_sub_agents_write_tool_is_settled_through_its_parent(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    session = sid()
    clerk = refund_script(script, "refund", tmp_path)
    parent = script(
        [
            respond(tool_use("a1", "clerk", prompt="refund order 20"), stop="tool_use"),
            respond(text("the clerk is done")),
        ],
        agents={"clerk": SubAgent(description="Makes refunds.", config=clerk)},
    )
    child = f"{session}/clerk-a1"
    crashed(store, child, "r1")
    async with run_worker():
        ack = await keel.prompt(session, "refund", config=parent)
        interrupt = await unknown_outcome(keel, session, ack.turn_id)
        assert interrupt.reason.startswith("[sub-agent clerk]")
        await decide(
            keel,
            session,
            Decision(interrupt_id=interrupt.id, decision="resolve", result="made by hand"),
        )
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        child_state = await keel.state(child)
        [record] = await keel.effects(child)
    assert done.status == "completed", done
    assert read_runs(tmp_path) == []
    assert result_texts(child_state.messages[2]) == [("r1", "success", "made by hand")]
    assert record.outcome == "resolved"


async def test_a_retry_reads_well_in_show_watch_and_the_page(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    tmp_path: Path,
) -> None:
    """The ``tool_retried`` event a real run emits, as each view words it."""
    from keel.worker.cli.console import show_json
    from keel.worker.cli.follow import event_line
    from keel.worker.client.effects_listing import retried_text
    from keel.worker.ui.context import templates
    from keel.worker.ui.views import effects_table, session_view

    session = sid()
    crashed(store, session, "r1")
    config = refund_script(script, "effect", tmp_path)
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        assert (await keel.wait_turn(session, ack.turn_id, timeout_s=30)).status == "completed"
        state = await keel.state(session)
        records = await keel.effects(session, state)
    [event] = [e for e in state.events if e.type == "tool_retried"]
    said = retried_text(event.detail)
    assert said.startswith("retried (attempt 2): attempt 1 (started "), said
    assert "on dead-host/4242) ended without a result" in said
    assert "previous attempt attempt" not in said
    assert said in (event_line(event, {}) or "")
    [shown] = show_json(state)["tool_retried"]  # keel show --json
    assert (shown["tool"], shown["id"], shown["attempt"]) == ("effect", "r1", 2), shown
    assert "ended without a result" in shown["previous"]
    html = (
        templates()
        .get_template("_effects.html")
        .render(view=session_view(state), effects=effects_table(records))
    )
    assert f"effect (r1): {said}" in html.replace("&#39;", "'")
    assert '<tr class="outcome-retried">' in html
