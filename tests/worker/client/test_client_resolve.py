"""``KeelClient.resolve`` signs over the result it records; ``KeelClient.effects`` reads them.

The signature of a resolve covers its result (``signed_value``): one made for one result
records no other, nor approves. Checked at unit level with ``check_decision`` (signing v2),
then through a real Temporal against the stand-in session (its ``decide`` validator runs
Keel's checks), with forged updates sent straight to Temporal as an attacker would.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from keel import KeelClient, RequestRejected
from keel.worker.signing import ApproverKey, generate_key
from keel.workflows.approvals import check_decision
from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Decision, Interrupt, SessionConfig
from keel.workflows.standing import signed_value
from tests.helpers.outcome_unknown import (
    outcome_unknown,
    records,
    stand_in_worker,
    start_stand_in,
)

NAMESPACE = "default"


def signed(key: ApproverKey, interrupt: Interrupt, decision: Decision, session: str) -> str:
    return key.sign_for(
        interrupt,
        namespace=NAMESPACE,
        session_id=session,
        kind="decide",
        what=signed_value(decision),
        reason=decision.reason,
        approver=decision.approver,
    )


def test_a_resolve_signature_does_not_verify_for_another_result(tmp_path: Path) -> None:
    public = generate_key(tmp_path / "ana.key")
    key = ApproverKey.load(tmp_path / "ana.key")
    config = SessionConfig(model="scripted:x.json", approver_keys={"ana": public})
    interrupt = outcome_unknown()
    assert interrupt.signing == 2
    pending = {interrupt.id: interrupt}
    resolve = Decision(
        interrupt_id=interrupt.id, decision="resolve", approver="ana", result="refunded #7"
    )
    resolve.signature = signed(key, interrupt, resolve, "s1")
    assert check_decision(pending, resolve, config, ("s1",), NAMESPACE) is interrupt

    forged = [
        resolve.model_copy(update={"result": "refunded #8"}),  # another result
        resolve.model_copy(update={"result": None, "decision": "approve"}),  # run it again
        resolve.model_copy(update={"result": None, "decision": "deny"}),
        resolve.model_copy(update={"reason": "said so"}),  # the reason is covered too
    ]
    for decision in forged:
        with pytest.raises(InputRejected, match="the decision by 'ana' is refused"):
            check_decision(pending, decision, config, ("s1",), NAMESPACE)
    with pytest.raises(InputRejected, match="refused"):  # bound to its session and namespace
        check_decision(pending, resolve, config, ("s2",), NAMESPACE)
    with pytest.raises(InputRejected, match="refused"):
        check_decision(pending, resolve, config, ("s1",), "other")

    approve = Decision(interrupt_id=interrupt.id, decision="approve", approver="ana")
    approve.signature = signed(key, interrupt, approve, "s1")
    as_resolve = approve.model_copy(update={"decision": "resolve", "result": "anything"})
    with pytest.raises(InputRejected, match="refused"):  # an approval records no result
        check_decision(pending, as_resolve, config, ("s1",), NAMESPACE)


async def test_resolve_is_signed_and_sent_and_forgeries_are_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    public = generate_key(tmp_path / "ana.key")
    bob = generate_key(tmp_path / "bob.key")
    key = ApproverKey.load(tmp_path / "ana.key")
    config = SessionConfig(model="scripted:x.json", approver_keys={"ana": public, "bob": bob})
    session = f"resolve-{uuid.uuid4().hex[:8]}"
    approval = outcome_unknown("ap-1", kind="approval")
    keel = KeelClient(client, task_queue)
    async with stand_in_worker(client, task_queue):
        handle = await start_stand_in(
            client,
            task_queue,
            session,
            config,
            [outcome_unknown(), approval],
            effects=records(session),
        )
        try:
            assert await keel.effects(session) == records(session).effects

            # unsigned, signed by another's key, or naming a question-less approval: refused
            with pytest.raises(RequestRejected, match="no approver"):
                await keel.resolve(session, "ou-1", "refunded #7")
            with pytest.raises(RequestRejected, match="the decision by 'bob' is refused"):
                await keel.resolve(session, "ou-1", "refunded #7", approver="bob", key=key)
            with pytest.raises(RequestRejected, match="is an approval: resolve does not"):
                await keel.resolve(session, "ap-1", "done", approver="ana", key=key)
            with pytest.raises(RequestRejected, match="over the limit of 64,000 bytes"):
                await keel.resolve(session, "ou-1", "x" * 64_001, approver="ana", key=key)

            # a signature captured for one result, sent with another straight to Temporal
            shown = outcome_unknown()
            captured = Decision(
                interrupt_id="ou-1", decision="resolve", approver="ana", result="refunded #7"
            )
            captured.signature = signed(key, shown, captured, session)
            for forged in (
                captured.model_copy(update={"result": "refunded #700"}),
                captured.model_copy(update={"decision": "approve", "result": None}),
            ):
                with pytest.raises(WorkflowUpdateFailedError):
                    await handle.execute_update("decide", forged)
            assert await handle.query("decisions", result_type=list[Decision]) == []

            ack = await keel.resolve(
                session, "ou-1", "refunded #7", reason="seen in the bank", approver="ana", key=key
            )
            assert (ack.interrupt_id, ack.status, ack.turn_id) == ("ou-1", "resolved", 1)
            [taken] = await handle.query("decisions", result_type=list[Decision])
            assert (taken.decision, taken.result, taken.approver) == (
                "resolve",
                "refunded #7",
                "ana",
            )
            assert taken.reason == "seen in the bank" and taken.signature
            with pytest.raises(RequestRejected, match="no longer pending: it was resolved"):
                await keel.resolve(session, "ou-1", "refunded #7", approver="ana", key=key)
        finally:
            await handle.terminate()
