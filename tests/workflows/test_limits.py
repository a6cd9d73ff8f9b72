"""Size limits (issue 39): what a person or a client sends is held to ``keel.workflows.limits``.

Over a limit, an update is refused by its validator (nothing written to history) and a signal
is ignored; the session goes on answering. The largest accepted value in every field at once
still continues-as-new: measured on the ledger a run hands on, and proved on a live session.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

import tests.client_side_tools  # noqa: F401 - registers the client-side tools' contracts
from keel import ConversationStore, KeelClient, RequestRejected
from keel.worker.process.assembly import build_worker
from keel.workflows import limits
from keel.workflows.contracts import (
    Answer,
    CancelInput,
    ClientCall,
    ClientResult,
    CloseInput,
    Condition,
    Decision,
    Event,
    Interrupt,
    RevokeAck,
    RevokeInput,
    SessionConfig,
    StandingApproval,
    SteerInput,
    TurnRecord,
)
from keel.workflows.ledger import (
    CARRIED_CLOSED_INTERRUPTS,
    CARRIED_EVENTS,
    CARRIED_TURNS,
    UPDATE_IDS_KEPT,
    Ledger,
    QueuedPrompt,
    SessionInput,
)
from keel.workflows.messages import Message, ToolUse, text_block
from keel.workflows.session import STEERING_PREFIX
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use

CLIENT_TOOLS = "tests.client_side_tools"
MB = 1_000_000


def sid() -> str:
    return f"lim-{uuid.uuid4().hex[:10]}"


def sized(limit: int, overhead: int = 0) -> str:
    """A string that makes a field exactly ``limit`` bytes (less what surrounds it)."""
    return "x" * (limit - overhead)


def test_each_limit_refuses_naming_the_field_and_the_limit() -> None:
    i = "i-1"
    over = {
        "decision reason is 2,001 bytes, over the limit of 2,000 bytes": Decision(
            interrupt_id=i, decision="deny", reason="r" * 2_001
        ),
        "approver is 201 bytes, over the limit of 200 bytes": Decision(
            interrupt_id=i, decision="deny", approver="a" * 201
        ),
        "signature is 201 bytes": Decision(interrupt_id=i, decision="deny", signature="s" * 201),
        "always_when is 11 tests, over the limit of 10 tests": Decision(
            interrupt_id=i,
            decision="approve",
            always=True,
            always_when=[Condition(field="n", op="==", value=k) for k in range(11)],
        ),
        "always_when test 1 (path startswith ...) is 1,000,0": Decision(
            interrupt_id=i,
            decision="approve",
            always=True,
            always_when=[Condition(field="path", op="startswith", value="d" * MB)],
        ),
        # a control character counts as the payload carries it: six bytes
        "decision reason is 2,004 bytes": Decision(
            interrupt_id=i, decision="deny", reason="\x00" * 334
        ),
        "answer is 4,003 bytes, over the limit of 4,000 bytes": Answer(
            interrupt_id=i, value="v" * 4_001
        ),
        "responder is 201 bytes": Answer(interrupt_id=i, value=1, responder="r" * 201),
        "steering text is 4,001 bytes": SteerInput(text="s" * 4_001),
        "revoking approver (by) is 201 bytes": RevokeInput(tool="t", by="b" * 201),
        "cancel reason is 2,001 bytes": CancelInput(reason="c" * 2_001),
        "close reason is 2,001 bytes": CloseInput(reason="c" * 2_001),
        "client name is 201 bytes": ClientResult(
            call_id="c", idempotency_key="k", client="n" * 201
        ),
        "a client's error is 4,001 bytes": ClientResult(
            call_id="c", idempotency_key="k", error="e" * 4_001
        ),
        "a client's result is 1,000,0": ClientResult(
            call_id="c", idempotency_key="k", output="o" * MB
        ),
    }
    for expected, value in over.items():
        with pytest.raises(limits.InputRejected) as refused:
            limits.check_input(value)
        assert expected in str(refused.value), (expected, str(refused.value))
    at = Decision(
        interrupt_id=i,
        decision="approve",
        reason=sized(limits.REASON_BYTES),
        approver=sized(limits.NAME_BYTES),
        always=True,
        always_when=[largest_test(k) for k in range(limits.TESTS_PER_APPROVAL)],
    )
    limits.check_input(at)  # the largest accepted decision
    with pytest.raises(limits.InputRejected, match="prompt is 21 content blocks"):
        limits.check_prompt_size(21, 100)
    with pytest.raises(limits.InputRejected, match="guidance waiting .* is 11 texts"):
        limits.check_steer(SteerInput(text="s"), queued=10)
    with pytest.raises(limits.InputRejected, match="holds 32 standing approvals, the limit"):
        limits.check_standing_count(32, replacing=False)
    limits.check_standing_count(32, replacing=True)  # a tool's new approval replaces its old


def largest_test(k: int) -> Condition:
    """A test of ``TEST_BYTES`` exactly that every input with ``value`` "1".."9" passes."""
    test = Condition(field="value", op="!=", value=f"{k}")
    room = limits.TEST_BYTES - limits.json_bytes(test.model_dump(mode="json"))
    test = Condition(field="value", op="!=", value=f"{k}" + "z" * room)
    assert limits.json_bytes(test.model_dump(mode="json")) == limits.TEST_BYTES
    return test


def largest_total() -> Condition:
    """A standing approval's ``total`` of ``TEST_BYTES`` exactly (a long field name)."""
    value = 1.2345678901234567e300
    bare = Condition(field="f", op="<=", value=value).model_dump(mode="json")
    total = Condition(
        field="f" * (limits.TEST_BYTES - limits.json_bytes(bare) + 1), op="<=", value=value
    )
    assert limits.json_bytes(total.model_dump(mode="json")) == limits.TEST_BYTES
    return total


def largest_ledger() -> Ledger:
    """A ledger with the largest value a person or a client can have it keep, everywhere."""
    name, reason = sized(limits.NAME_BYTES), sized(limits.REASON_BYTES)
    when = [largest_test(k) for k in range(limits.TESTS_PER_APPROVAL)]
    use = ToolUse(toolUseId="u" * 64, name="t" * 64, input={"path": "docs/a"})
    prompt = [text_block(sized(limits.PROMPT_BYTES, 11))]  # {"text":"..."}
    ledger = Ledger(
        messages=[Message(role="user", content=prompt)],
        queue=[
            QueuedPrompt(turn_id=2, content=[text_block(sized(limits.QUEUED_PROMPT_BYTES, 11))])
        ],
        steering=[sized(limits.STEER_BYTES)] * limits.STEERING_QUEUED,
    )
    # guidance already shown to the model, not stored yet, and as much waiting again
    shown = [text_block(STEERING_PREFIX + t) for t in ledger.steering]
    ledger.messages.append(Message(role="assistant", content=[text_block("ok")]))
    ledger.messages.append(Message(role="user", content=shown))
    for k in range(limits.STANDING_APPROVALS):
        tool = f"{k:02d}" + "t" * 62
        ledger.standing[tool] = StandingApproval(
            tool=tool,
            when=when,
            granted_by=name,
            interrupt_id=str(uuid.uuid4()),
            turn=1,
            max_uses=limits.MAX_USES,  # and the bounds, each at its largest (issue 44)
            uses=limits.MAX_USES - 1,
            expires_at="2026-12-01T00:00:00.123456+00:00",
            total=largest_total(),
            spent=1.2345678901234567e300,
        )
    for k in range(CARRIED_CLOSED_INTERRUPTS):
        ledger.interrupts[f"{k}"] = Interrupt(
            id=str(uuid.uuid4()),
            kind="question",
            tool_use=use,
            name="n" * 64,
            reason="which one?",
            turn=1,
            status="answered",
            decided_by=name,
            answer=sized(limits.ANSWER_BYTES, 2),  # more than an approval's reason
        )
    for k in range(CARRIED_TURNS):
        ledger.turns[k + 1] = TurnRecord(turn_id=k + 1, status="cancelled", error=reason)
    for k in range(limits.QUEUED_PROMPTS - 1):  # the other queued prompts: one character each
        turn = CARRIED_TURNS + 2 + k
        ledger.turns[turn] = TurnRecord(turn_id=turn)
        ledger.queue.append(QueuedPrompt(turn_id=turn, content=[text_block("?")]))
    for k in range(CARRIED_EVENTS):
        detail = {"id": str(uuid.uuid4()), "status": "approved", "by": name, "key": "f" * 64}
        ledger.events.append(
            Event(seq=k, type="interrupt_decided", at="2026-12-01T00:00:00+00:00", detail=detail)
        )
    for k in range(CARRIED_CLOSED_INTERRUPTS):  # ended client calls kept
        ledger.client_calls[f"{k}"] = ClientCall(
            id=str(uuid.uuid4()),
            tool_use=use,
            idempotency_key="k" * 1_000,
            turn=1,
            cycle=1,
            timeout_s=60,
            expires_at="2026-12-01T00:00:00+00:00",
            status="failed",
            client=name,
            result_digest="d" * 64,
            note="n" * limits.NOTE_CHARS + " [...]",
        )
    approval = next(iter(ledger.standing.values()))
    for k in range(UPDATE_IDS_KEPT):
        update_id = f"{k:04d}" + "u" * 996  # Temporal takes ids of up to 1,000 characters
        ledger.remember_ack(f"revoke/{update_id}", RevokeAck(revoked=approval))
        ledger.remember_prompt(update_id, k)
    return ledger


def payload_bytes(value: Any) -> int:
    [payload] = pydantic_data_converter.payload_converter.to_payloads([value])
    return payload.ByteSize()


def test_the_largest_accepted_values_continue_as_new_within_one_payload() -> None:
    """Every field at its limit, every count at its limit: the next run's input still fits."""
    ledger = largest_ledger()
    for kept in (ledger.update_acks, ledger.prompt_updates):  # bounded by bytes, not just count
        size = sum(len(k) + len(str(v)) for k, v in kept.items())
        assert size <= limits.UPDATE_MEMORY_BYTES, size
    config = SessionConfig(model="scripted:x.json", tool_modules=[SAMPLE_TOOLS])
    carried = payload_bytes(SessionInput(config=config, carried=ledger.for_next_run()))
    parts = {
        name: payload_bytes(getattr(ledger, name))
        for name in ("messages", "queue", "steering", "standing", "interrupts", "turns")
    }
    print(f"carried: {carried:,} bytes; {parts}")
    assert carried < 1_500_000, f"{carried:,} bytes leave too little room under the 2 MB cap"
    assert carried < limits.BLOB_CAP


# ---------------------------------------------------------------------------- live sessions


def gate_and_question(path: str) -> list[dict[str, Any]]:
    """One cycle that asks for an approval and a question; then two more covered calls."""
    return [
        respond(
            tool_use("a", "guarded_record", path=path, value="1"),
            tool_use("q", "pick_account", query="acme"),
            stop="tool_use",
        ),
        respond(tool_use("b", "guarded_record", path=path, value="2"), stop="tool_use"),
        respond(text("done")),
    ]


async def both_pending(keel: KeelClient, session: str) -> dict[str, str]:
    for _ in range(200):
        pending = (await keel.pending(session)).interrupts
        if len(pending) == 2:
            return {i.kind: i.id for i in pending}
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session}: the approval and the question never both waited")


async def accepted_updates(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return sum(1 for e in history.events if e.event_type == accepted)


async def refused(handle: WorkflowHandle[Any, Any], update: str, arg: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update(update, arg)
    return str(failed.value.cause)


async def test_oversize_inputs_by_raw_update_are_refused_and_never_stored(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Any
) -> None:
    session = sid()
    big = "x" * MB
    async with run_worker():
        ack = await keel.prompt(
            session, "go", config=script(gate_and_question(str(tmp_path / "o")))
        )
        ids = await both_pending(keel, session)
        approval, question = ids["approval"], ids["question"]
        handle = keel.client.get_workflow_handle(session)
        before = await accepted_updates(handle)
        decide = {"interrupt_id": approval, "decision": "approve"}
        attacks: list[tuple[str, Any, str]] = [
            (
                "decide",
                {
                    **decide,
                    "always": True,
                    "always_when": [{"field": "path", "op": "startswith", "value": big}],
                },  # noqa: E501
                "always_when test 1 (path startswith ...) is 1,000,0",
            ),
            (
                "decide",
                {
                    **decide,
                    "always": True,
                    "always_when": [{"field": "n", "op": "==", "value": k} for k in range(11)],
                },  # noqa: E501
                "always_when is 11 tests, over the limit of 10 tests",
            ),
            ("decide", {**decide, "reason": big}, "decision reason is 1,000,000 bytes"),
            ("decide", {**decide, "approver": big}, "approver is 1,000,000 bytes"),
            ("decide", {**decide, "signature": big}, "signature is 1,000,000 bytes"),
            ("respond", {"interrupt_id": question, "value": big}, "answer is 1,000,002 bytes"),
            ("respond", {"interrupt_id": question, "value": 1, "responder": big}, "responder is"),
            ("steer", {"text": big}, "steering text is 1,000,000 bytes"),
            ("cancel", {"reason": big}, "cancel reason is 1,000,000 bytes"),
            ("revoke", {"tool": "guarded_record", "by": big}, "revoking approver (by) is"),
            ("prompt", {"content": [{"text": "p" * 300_000}]}, "prompt is 300,011 bytes"),
            ("prompt", {"content": [{"text": "p"}] * 21}, "prompt is 21 content blocks"),
        ]
        for update, arg, expected in attacks:
            said = await refused(handle, update, arg)
            assert expected in said, (update, said)
        history = await handle.fetch_history()
        assert sum(e.ByteSize() for e in history.events) < 100_000  # no megabyte stored
        # the same by signal: in history (a signal always is), logged and ignored
        await handle.signal("decide", {**decide, "reason": big})
        await handle.signal("respond", {"interrupt_id": question, "value": big})
        # steering: ten texts wait at most
        for k in range(limits.STEERING_QUEUED):
            await keel.steer(session, f"hint {k}")
        said = await refused(handle, "steer", {"text": "one more"})
        assert "is 11 texts, over the limit of 10 texts" in said, said
        pending = await keel.pending(session)
        assert {i.id for i in pending.interrupts} == {approval, question}
        assert await accepted_updates(handle) == before + limits.STEERING_QUEUED
        await keel.decide(session, approval, "approve", always=True)
        await keel.respond(session, question, "acme-1")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
    assert done.status == "completed", done


@pytest.fixture
def client_worker(client: Client, task_queue: str, store: ConversationStore) -> RunWorker:
    @asynccontextmanager
    async def _run(**options: Any) -> AsyncIterator[Worker]:
        modules = [SAMPLE_TOOLS, CLIENT_TOOLS]
        async with build_worker(client, task_queue, modules, store=store, **options) as worker:
            yield worker

    return _run


async def test_an_oversize_client_result_by_raw_update_is_refused(
    keel: KeelClient, client_worker: RunWorker, script: Script
) -> None:
    steps = [
        respond(tool_use("f", "local_forecast", city="Oslo"), stop="tool_use"),
        respond(text("ok")),
    ]
    config = script(steps, tool_modules=[SAMPLE_TOOLS, CLIENT_TOOLS])
    session = sid()
    async with client_worker():
        ack = await keel.prompt(session, "weather?", config=config)
        for _ in range(200):
            calls = await keel.client_calls(session)
            if calls:
                break
            await asyncio.sleep(0.05)
        [call] = calls
        handle = keel.client.get_workflow_handle(session)
        base = {"call_id": call.id, "idempotency_key": call.idempotency_key}
        for arg, expected in (
            ({**base, "output": "o" * 1_100_000}, "a client's result is 1,100,0"),
            ({**base, "error": "e" * 5_000}, "a client's error is 5,000 bytes"),
            ({**base, "output": {"c": 1}, "client": "n" * 300}, "client name is 300 bytes"),
        ):
            said = await refused(handle, "tool_result", arg)
            assert expected in said, said
        with pytest.raises(RequestRejected, match="a client's error is 5,000 bytes"):
            await keel.tool_result(session, call.id, call.idempotency_key, error="e" * 5_000)
        assert [c.id for c in await keel.client_calls(session)] == [call.id]
        await keel.tool_result(
            session, call.id, call.idempotency_key, output={"city": "Oslo", "celsius": 3}
        )
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
    assert done.status == "completed", done


async def carried_inputs(client: Client, session: str) -> list[tuple[int, SessionInput]]:
    """What each run of the session started with (its size in bytes, and itself)."""
    found = []
    async for run in client.list_workflows(f"WorkflowId = '{session}'"):
        history = await client.get_workflow_handle(session, run_id=run.run_id).fetch_history()
        payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
        [value] = pydantic_data_converter.payload_converter.from_payloads(
            list(payloads), [SessionInput]
        )
        found.append((sum(p.ByteSize() for p in payloads), value))
    return found


async def test_the_largest_accepted_values_on_every_field_survive_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Any
) -> None:
    """Every field a person sends at its limit, then continue-as-new: the session still works."""
    out, note = tmp_path / "out.txt", tmp_path / "note.txt"
    steps = [
        *gate_and_question(str(out)),
        respond(text("read it")),  # turn 2: the largest prompt, queued behind turn 1
        respond(tool_use("n", "guarded_note", path=str(note), value="x"), stop="tool_use"),
        respond(text("still here")),  # turn 4, after turn 3 was cancelled
    ]
    name = sized(limits.NAME_BYTES)
    session = sid()
    async with run_worker():
        config = script(steps, continue_as_new_events=20)
        first = await keel.prompt(session, "go", config=config)
        ids = await both_pending(keel, session)
        for k in range(limits.STEERING_QUEUED):
            await keel.steer(session, f"{k}" + sized(limits.STEER_BYTES, 1))
        await keel.respond(session, ids["question"], sized(limits.ANSWER_BYTES, 2), responder=name)
        # queued once the question is answered: a question that waits across
        # continue-as-new with a prompt queued is asked again (so on main too; not sizes)
        queued = await keel.prompt(session, sized(limits.QUEUED_PROMPT_BYTES, 11))
        when = [largest_test(k) for k in range(limits.TESTS_PER_APPROVAL)]
        await keel.decide(
            session,
            ids["approval"],
            "approve",
            reason=sized(limits.REASON_BYTES),
            approver=name,
            always=True,
            always_when=when,
            max_uses=limits.MAX_USES,
            for_s=limits.MAX_FOR_S,
        )
        for turn in (first.turn_id, queued.turn_id):
            done = await keel.wait_turn(session, turn, timeout_s=90)
            shown = [(i.kind, i.name, i.tool_use.input) for i in done.interrupts]
            assert done.status == "completed", shown
        assert out.read_text().splitlines() == ["1", "2"]  # the second ran on the approval
        [standing] = (await keel.pending(session)).standing
        assert standing.when == when and standing.granted_by == name
        assert (standing.max_uses, standing.uses) == (limits.MAX_USES, 1)
        revoked = await keel.revoke(session, "guarded_record", by=name)
        assert revoked.revoked.when == when
        third = await keel.prompt(session, "note it")
        for _ in range(200):
            if (await keel.pending(session)).interrupts:
                break
            await asyncio.sleep(0.05)
        await keel.cancel(session, sized(limits.REASON_BYTES))
        cancelled = await keel.wait_turn(session, third.turn_id, timeout_s=60)
        fourth = await keel.run(session, "and now?", timeout_s=60)
        state = await keel.state(session, include_messages=False)
    assert cancelled.status == "cancelled" and cancelled.error == sized(limits.REASON_BYTES)
    assert fourth.status == "completed", fourth
    assert state.run > 1 and not note.exists()
    runs = await carried_inputs(keel.client, session)
    print(f"runs: {len(runs)}; inputs: {sorted(size for size, _ in runs)}")
    # a run was handed every largest value at once: the queued prompt, the standing approval's
    # tests, the answer, the decision's reason and names (and it went on, as above)
    everything = [
        size
        for size, value in runs
        if value.carried is not None
        and value.carried.queue
        and value.carried.standing
        and any(
            i.answer == sized(limits.ANSWER_BYTES, 2) for i in value.carried.interrupts.values()
        )
        and any(
            i.decision_reason == sized(limits.REASON_BYTES)
            for i in value.carried.interrupts.values()
        )
    ]
    assert everything, [size for size, _ in runs]
    assert max(size for size, _ in runs) < 1_000_000
