"""Signed approvals (S4): only the named approver's key decides; every forgery is refused.

Each forged kind is sent through ``KeelClient`` and as raw Temporal updates and signals.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from keel import ConversationStore, KeelClient, RequestRejected
from keel.worker.process.assembly import build_worker
from keel.worker.signing import ApproverKey, generate_key
from keel.workflows.contracts import Condition, Decision, Interrupt
from keel.workflows.signing import fingerprint
from keel.workflows.standing import signed_value
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import save_history
from tests.workflows.test_session import update_events


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def keys(tmp_path: Path, *names: str) -> dict[str, tuple[ApproverKey, str]]:
    out = {}
    for name in names:
        public = generate_key(tmp_path / f"{name}.key")
        out[name] = (ApproverKey.load(tmp_path / f"{name}.key"), public)
    return out


def signed(
    key: ApproverKey,
    session: str,
    interrupt: Interrupt,
    decision: str,
    reason: str | None,
    approver: str,
    namespace: str = "default",
) -> dict[str, Any]:
    """A raw ``decide`` input, signed for ``interrupt`` as shown (the current message)."""
    return {
        "interrupt_id": interrupt.id,
        "decision": decision,
        "reason": reason,
        "approver": approver,
        "signature": key.sign_for(
            interrupt,
            namespace=namespace,
            session_id=session,
            kind="decide",
            what=decision,
            reason=reason,
            approver=approver,
        ),
    }


def signed_v1(
    key: ApproverKey, session: str, interrupt: str, decision: str, reason: str | None, approver: str
) -> dict[str, Any]:
    """A raw ``decide`` input signed as before version 2 (no namespace, tool or input)."""
    return {
        "interrupt_id": interrupt,
        "decision": decision,
        "reason": reason,
        "approver": approver,
        "signature": key.sign(session, interrupt, "decide", decision, reason, approver),
    }


def test_keygen_writes_a_private_file_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "alice.key"
    public = generate_key(path)
    assert public.startswith("ed25519:") and (path.stat().st_mode & 0o777) == 0o600
    assert ApproverKey.load(path).public_key == public
    with pytest.raises(ValueError, match="refusing to overwrite"):
        generate_key(path)


async def test_only_a_signature_by_the_named_key_decides(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    k = keys(tmp_path, "alice", "mallory")
    alice, mallory = k["alice"][0], k["mallory"][0]
    target = tmp_path / "out.txt"
    steps = [
        respond(tool_use("g1", "guarded_record", path=str(target), value="a"), stop="tool_use"),
        respond(text("done")),
    ]
    config = script(steps, approver_keys={"alice": k["alice"][1]})
    other = sid()  # another session with the same approver: a signature for it is no use here
    session = sid()
    async with run_worker():
        first = await keel.run(session, "go", config=config, timeout_s=30)
        await keel.run(
            other, "go", config=script(steps, approver_keys={"alice": k["alice"][1]}), timeout_s=30
        )
        [interrupt] = first.interrupts
        [other_interrupt] = (await keel.pending(other)).interrupts
        iid = interrupt.id
        handle = keel.client.get_workflow_handle(session)

        # through KeelClient: unsigned, another key, a name with no key, a wrong approver name
        with pytest.raises(RequestRejected, match="is not signed"):
            await keel.decide(session, iid, "approve", approver="alice")
        with pytest.raises(RequestRejected, match="does not verify"):
            await keel.decide(session, iid, "approve", approver="alice", key=mallory)
        with pytest.raises(RequestRejected, match="'mallory' has no approver key"):
            await keel.decide(session, iid, "approve", approver="mallory", key=mallory)
        with pytest.raises(RequestRejected, match="names no approver"):
            await keel.decide(session, iid, "approve", key=alice)

        # raw updates: replayed onto another interrupt or session, tampered reason or decision
        good_deny = signed(alice, session, interrupt, "deny", "too risky", "alice")
        forgeries = [
            {**good_deny, "reason": "fine by me"},  # tampered reason
            {**good_deny, "decision": "approve"},  # tampered decision
            signed(alice, other, interrupt, "approve", None, "alice"),  # for another session
            {
                **signed(alice, session, other_interrupt, "approve", None, "alice"),
                "interrupt_id": iid,
            },
            {**signed(mallory, session, interrupt, "approve", None, "alice")},  # another key
            {**good_deny, "signature": "not base64!"},
            {**good_deny, "signature": None},
        ]
        for forged in forgeries:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await handle.execute_update("decide", forged)
            assert "refused" in str(caught.value.cause) or "not signed" in str(caught.value.cause)
            await handle.signal("decide", forged)
        # the other session's own signature still does not count here, even sent to it
        await asyncio.sleep(1.0)
        assert (await keel.turn(session, first.turn_id)).status == "awaiting_human"
        assert not target.exists()

        ack = await keel.decide(session, iid, "approve", approver="alice", key=alice)
        assert ack.status == "approved"
        done = await keel.wait_turn(session, first.turn_id, timeout_s=30)
        state = await keel.state(session)
        history = await handle.fetch_history()
    assert done.status == "completed"
    assert target.read_text().splitlines() == ["a"]
    [decided] = [e for e in state.events if e.type == "interrupt_decided"]
    assert decided.detail["by"] == "alice"
    assert decided.detail["key"] == fingerprint(k["alice"][1]) == alice.fingerprint
    # one prompt and one decision in history; no rejected update was written
    assert update_events(history) == ["ACCEPTED", "COMPLETED"] * 2


async def test_a_signed_decide_signal_counts_and_a_forged_one_is_ignored(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    k = keys(tmp_path, "alice", "mallory")
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="s"), stop="tool_use"),
            respond(text("done")),
        ],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid()
    async with run_worker():
        first = await keel.run(session, "go", config=config, timeout_s=30)
        [shown] = first.interrupts
        iid = shown.id
        handle = keel.client.get_workflow_handle(session)
        await handle.signal(
            "decide", signed(k["mallory"][0], session, shown, "approve", None, "alice")
        )
        await handle.signal(
            "decide", {"interrupt_id": iid, "decision": "approve", "approver": "alice"}
        )
        await asyncio.sleep(1.0)
        assert (await keel.turn(session, first.turn_id)).status == "awaiting_human"
        await handle.signal(
            "decide", signed(k["alice"][0], session, shown, "approve", None, "alice")
        )
        done = await keel.wait_turn(session, first.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert target.read_text().splitlines() == ["s"]


async def test_answers_are_signed_too(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    k = keys(tmp_path, "alice", "mallory")
    alice = k["alice"][0]
    config = script(
        [
            respond(
                tool_use("p1", "pick_account", query="rent", log=str(tmp_path / "r")),
                stop="tool_use",
            ),
            respond(text("paid")),
        ],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "pay the rent", config=config)
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        [question] = record.interrupts
        qid = question.id
        handle = keel.client.get_workflow_handle(session)
        with pytest.raises(RequestRejected, match="is not signed"):
            await keel.respond(session, qid, "savings", responder="alice")
        with pytest.raises(RequestRejected, match="does not verify"):
            await keel.respond(session, qid, "savings", responder="alice", key=k["mallory"][0])
        tampered = {
            "interrupt_id": qid,
            "value": "checking",  # signed "savings"
            "responder": "alice",
            "signature": alice.sign_for(
                question,
                namespace="default",
                session_id=session,
                kind="respond",
                what="savings",
                reason=None,
                approver="alice",
            ),
        }

        # the right answer, signed for the question shown with another input or name
        def answer_for(shown: Interrupt) -> dict[str, Any]:
            signature = alice.sign_for(
                shown,
                namespace="default",
                session_id=session,
                kind="respond",
                what="savings",
                reason=None,
                approver="alice",
            )
            return {**tampered, "value": "savings", "signature": signature}

        other_use = question.tool_use.model_copy(update={"input": {"query": "salary"}})
        forged = [
            tampered,
            answer_for(question.model_copy(update={"tool_use": other_use})),
            answer_for(question.model_copy(update={"name": "card"})),
        ]
        for answer in forged:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await handle.execute_update("respond", answer)
            assert "does not verify" in str(caught.value.cause)
            await handle.signal("respond", answer)
        await asyncio.sleep(0.5)
        assert (await keel.turn(session, ack.turn_id)).status == "awaiting_human"
        answered = await keel.respond(session, qid, "savings", responder="alice", key=alice)
        assert answered.status == "answered"
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"


async def test_a_signed_session_is_recorded(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A signed decision and a signed answer, recorded for the replay tests."""
    k = keys(tmp_path, "alice")
    alice = k["alice"][0]
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="r"), stop="tool_use"),
            respond(tool_use("p1", "pick_account", query="rent"), stop="tool_use"),
            respond(text("done")),
        ],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        [approval] = record.interrupts
        await keel.decide(session, approval.id, "approve", approver="alice", key=alice)
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        [question] = [i for i in record.interrupts if i.kind == "question"]
        await keel.respond(session, question.id, "savings", responder="alice", key=alice)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        await keel.close(session)
        await keel.client.get_workflow_handle(session).result()
        await save_history(keel.client, session, "signed_approvals")
    assert done.status == "completed"
    assert target.read_text().splitlines() == ["r"]


def two_writes(tmp_path: Path) -> tuple[Path, Path, list[Any]]:
    """A model that writes two files in one message: two interrupts of the same tool."""
    safe, secret = tmp_path / "docs.txt", tmp_path / "passwd"
    steps = [
        respond(
            tool_use("w1", "guarded_record", path=str(safe), value="ok"),
            tool_use("w2", "guarded_record", path=str(secret), value="root::0:0"),
            stop="tool_use",
        ),
        respond(text("done")),
    ]
    return safe, secret, steps


async def test_a_signature_binds_the_input_tool_and_namespace_shown(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """What a rogue server captures: alice signs the interrupt id it shows, over another call.

    The old message covered session, interrupt, decision, reason and approver only: a
    signature alice made for interrupt ``w2`` shown with a harmless input approved ``w2``'s
    real input (a write to ``passwd``). Each capture below is refused by update and signal,
    and nothing is recorded; then alice's own decisions, signed for what is shown, count.
    """
    k = keys(tmp_path, "alice")
    alice = k["alice"][0]
    safe, secret, steps = two_writes(tmp_path)
    config = script(steps, approver_keys={"alice": k["alice"][1]})
    session = sid()
    async with run_worker():
        first = await keel.run(session, "go", config=config, timeout_s=30)
        by_use = {i.tool_use.toolUseId: i for i in first.interrupts}
        harmless, target = by_use["w1"], by_use["w2"]
        assert harmless.signing == target.signing == 2
        handle = keel.client.get_workflow_handle(session)
        # w2's id, shown with w1's input (same tool, another path)
        other_input = target.model_copy(update={"tool_use": harmless.tool_use})
        # w2's id and input, shown as another tool
        other_tool = target.model_copy(
            update={
                "name": "guarded_note",
                "tool_use": target.tool_use.model_copy(update={"name": "guarded_note"}),
            }
        )
        # a standing approval signed for calls under docs/, sent with its test dropped
        when = [Condition(field="path", op="startswith", value=str(safe.parent) + "/docs/")]
        standing = Decision(
            interrupt_id=target.id, decision="approve", always=True, always_when=when
        )
        narrow = {
            "interrupt_id": target.id,
            "decision": "approve",
            "approver": "alice",
            "always": True,
            "always_when": [c.model_dump(mode="json") for c in when],
            "signature": alice.sign_for(
                target,
                namespace="default",
                session_id=session,
                kind="decide",
                what=signed_value(standing),
                reason=None,
                approver="alice",
            ),
        }
        captures = {
            "old format": signed_v1(alice, session, target.id, "approve", None, "alice"),
            "another input": signed(alice, session, other_input, "approve", None, "alice"),
            "another tool": signed(alice, session, other_tool, "approve", None, "alice"),
            "another namespace": signed(
                alice, session, target, "approve", None, "alice", namespace="rogue"
            ),
            "upgraded to always": {
                **signed(alice, session, target, "approve", None, "alice"),
                "always": True,
            },
            "tests widened": {**narrow, "always_when": []},
        }
        for name, captured in captures.items():
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await handle.execute_update("decide", captured)
            assert "does not verify" in str(caught.value.cause), name
            await handle.signal("decide", captured)
        await asyncio.sleep(1.0)
        pending = await keel.pending(session)
        assert {i.id for i in pending.interrupts} == {harmless.id, target.id}
        assert not secret.exists()
        history = await handle.fetch_history()
        assert update_events(history) == ["ACCEPTED", "COMPLETED"]  # the prompt only
        # the control: exactly what is shown, in this namespace, counts
        await handle.execute_update(
            "decide", signed(alice, session, harmless, "approve", None, "alice")
        )
        await keel.decide(session, target.id, "deny", reason="no", approver="alice", key=alice)
        done = await keel.wait_turn(session, first.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert safe.read_text().splitlines() == ["ok"]
    assert not secret.exists()


async def second_namespace(client: Client) -> Client:
    """A client of a new namespace on the same dev server, once the server serves it."""
    name = f"keel-other-{uuid.uuid4().hex[:6]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    other = Client(client.service_client, namespace=name, data_converter=client.data_converter)
    for _ in range(100):  # a new namespace reaches the frontend's cache within seconds
        try:
            await other.count_workflows()
            return other
        except RPCError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"namespace {name} never became usable")


async def test_a_signature_for_one_namespace_is_refused_in_another(
    keel: KeelClient,
    client: Client,
    run_worker: RunWorker,
    script: Script,
    store: ConversationStore,
    task_queue: str,
    tmp_path: Path,
) -> None:
    """The same session id in two namespaces of one server: what was signed in one (or for
    it) does not count in the other; a client signs for its own namespace."""
    k = keys(tmp_path, "alice")
    alice = k["alice"][0]
    safe, secret, steps = two_writes(tmp_path)
    session = sid()
    other_client = await second_namespace(client)
    other = KeelClient(other_client, task_queue, store)
    other_worker = build_worker(other_client, task_queue, [SAMPLE_TOOLS], store=store)
    async with run_worker(), other_worker:
        config = script(steps, approver_keys={"alice": k["alice"][1]})
        here = await keel.run(session, "go", config=config, timeout_s=30)
        there = await other.run(session, "go", config=config, timeout_s=30)
        target = next(i for i in there.interrupts if i.tool_use.toolUseId == "w2")
        handle = other_client.get_workflow_handle(session)
        # signed for the default namespace, over exactly what the other one shows
        for_default = signed(alice, session, target, "approve", None, "alice")
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update("decide", for_default)
        assert "does not verify" in str(caught.value.cause)
        await handle.signal("decide", for_default)
        await asyncio.sleep(0.5)
        assert len((await other.pending(session)).interrupts) == 2
        # KeelClient signs for its client's namespace
        await other.decide(session, target.id, "deny", approver="alice", key=alice)
        assert target.id not in {i.id for i in (await other.pending(session)).interrupts}
        assert len((await keel.pending(session)).interrupts) == len(here.interrupts) == 2
    assert not secret.exists()
