"""Standing approvals (issue 35): approve and stop asking, narrowed, revoked, signed.

Attacked through ``KeelClient``, raw temporalio updates and signals, and the raw ``temporal``
CLI: a standing approval covers only its tool in its session, a signature for one call cannot
be turned into a standing one, and a tool that asks a person every time cannot be stood down.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, RequestRejected, TurnRecord
from keel.workflows.standing import describe, matches, parse_conditions
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history, temporal_cli
from tests.workflows.test_signed_approvals import keys


def sid() -> str:
    return f"st-{uuid.uuid4().hex[:10]}"


def gated(tool: str, path: Path, *values: str) -> list[dict[str, Any]]:
    """A model that calls ``tool`` once per value (one call per cycle), then says done."""
    calls = [
        respond(tool_use(f"{tool}-{v}", tool, path=str(path), value=v), stop="tool_use")
        for v in values
    ]
    return [*calls, respond(text("done"))]


async def parked(keel: KeelClient, session: str, turn: int) -> TurnRecord:
    for _ in range(150):
        record = await keel.turn(session, turn)
        if record.interrupts or record.status in ("completed", "failed", "cancelled"):
            return record
        await asyncio.sleep(0.1)
    raise AssertionError(f"{session} turn {turn} neither parked nor ended")


def test_the_conditions_read_and_test_as_written() -> None:
    tests = parse_conditions('path startswith "docs/" and size <= 10 and kind in ["a", "b"]')
    assert describe(tests) == 'path startswith "docs/" and size <= 10 and kind in ["a", "b"]'
    assert matches(tests, {"path": "docs/x.md", "size": 3, "kind": "a"})
    assert not matches(tests, {"path": "src/x.py", "size": 3, "kind": "a"})
    assert not matches(tests, {"path": "docs/x.md", "size": 11, "kind": "a"})
    assert not matches(tests, {"path": "docs/x.md", "kind": "a"})  # a missing field fails
    assert not matches(parse_conditions("size < 5"), {"size": "3"})  # no number, no order
    assert matches(parse_conditions("meta.owner == \"ann\""), {"meta": {"owner": "ann"}})
    for bad in ("path startswith docs/", "path ~ \"x\"", 'path == "x" or y == 1', ""):
        with pytest.raises(ValueError):
            parse_conditions(bad)


async def test_always_covers_the_tools_next_calls_and_nothing_else(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    out, other = tmp_path / "out.txt", tmp_path / "other.txt"
    steps = [
        *gated("guarded_record", out, "1", "2")[:-1],
        respond(tool_use("n1", "guarded_note", path=str(other), value="x"), stop="tool_use"),
        respond(text("done")),
    ]
    session, elsewhere = sid(), sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps))
        first = (await parked(keel, session, ack.turn_id)).interrupts[0]
        await keel.decide(session, first.id, "approve", always=True)
        # the second call of guarded_record runs without asking; guarded_note still asks
        record = await parked(keel, session, ack.turn_id)
        assert [i.tool_use.name for i in record.interrupts] == ["guarded_note"]
        assert out.read_text().splitlines() == ["1", "2"]
        [standing] = await keel.policy(session)
        assert standing.tool == "guarded_record" and standing.interrupt_id == first.id
        # another session of the same tools asks for guarded_record as always
        again = await keel.prompt(elsewhere, "go", config=script(gated("guarded_record", out, "3")))
        assert (await parked(keel, elsewhere, again.turn_id)).interrupts
        assert await keel.policy(elsewhere) == []
        state = await keel.state(session)
    used = [e for e in state.events if e.type == "standing_approval_used"]
    assert [e.detail["id"] for e in used] == ["guarded_record-2"]


async def test_revoking_makes_the_next_call_ask_again(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    # turn 1: two calls, the first approved always; turn 2: one more call, after the revoke
    steps = [*gated("guarded_record", out, "1", "2"), *gated("guarded_record", out, "3")]
    # replay runs a history under its file's name: record it under that id
    recording = os.environ.get("KEEL_RECORD_HISTORIES") == "1"
    session = "standing_approval" if recording else sid()
    async with run_worker():
        first = await keel.prompt(session, "one", config=script(steps))
        interrupt = (await parked(keel, session, first.turn_id)).interrupts[0]
        await keel.decide(session, interrupt.id, "approve", always=True)
        await keel.wait_turn(session, first.turn_id, timeout_s=30)
        assert out.read_text().splitlines() == ["1", "2"]
        with pytest.raises(RequestRejected, match="no standing approval"):
            await keel.revoke(session, "guarded_note")
        revoked = await keel.revoke(session, "guarded_record")
        assert revoked.revoked.tool == "guarded_record"
        assert await keel.policy(session) == []
        second = await keel.prompt(session, "two")
        asking = (await parked(keel, session, second.turn_id)).interrupts
        assert [i.tool_use.input["value"] for i in asking] == ["3"]
        assert out.read_text().splitlines() == ["1", "2"]
        await keel.decide(session, asking[0].id, "approve")
        await keel.wait_turn(session, second.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "standing_approval")
    assert out.read_text().splitlines() == ["1", "2", "3"]
    assert [e.type for e in state.events if e.type.startswith("standing_")] == [
        "standing_approval_granted",
        "standing_approval_used",
        "standing_approval_revoked",
    ]


async def test_a_narrowed_standing_approval_covers_matching_input_only(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    docs, src = tmp_path / "docs.txt", tmp_path / "src.txt"
    steps = [
        respond(tool_use("a", "guarded_record", path=str(docs), value="docs/1"), stop="tool_use"),
        respond(tool_use("b", "guarded_record", path=str(docs), value="docs/2"), stop="tool_use"),
        respond(tool_use("c", "guarded_record", path=str(src), value="src/3"), stop="tool_use"),
        respond(text("done")),
    ]
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps))
        first = (await parked(keel, session, ack.turn_id)).interrupts[0]
        when = parse_conditions('value startswith "docs/"')
        await keel.decide(session, first.id, "approve", always=True, always_when=when)
        record = await parked(keel, session, ack.turn_id)
        [asking] = record.interrupts
        assert asking.tool_use.input["value"] == "src/3"  # outside the tests: asks
        assert docs.read_text().splitlines() == ["docs/1", "docs/2"]
        await keel.decide(session, asking.id, "deny", reason="not src")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed" and not src.exists()


async def test_a_standing_approval_survives_continue_as_new_and_a_new_worker(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    values = [str(i) for i in range(8)]
    config = script(gated("guarded_record", out, *values), continue_as_new_events=40)
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        interrupt = (await parked(keel, session, ack.turn_id)).interrupts[0]
        await keel.decide(session, interrupt.id, "approve", always=True)
        for _ in range(100):  # let a call or two run on the standing approval
            if out.exists() and len(out.read_text().splitlines()) >= 3:
                break
            await asyncio.sleep(0.05)
    # the worker is gone (a tool it was running may run again: at least once); a new one (no
    # cache: it replays) carries on without asking anybody
    async with run_worker():
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
        while done.status == "awaiting_human":
            # the stopped worker was running the (write) tool: whether it ran is not known,
            # so a person says (issue 41); nothing else may ask
            assert {i.kind for i in done.interrupts} == {"outcome_unknown"}, done
            for interrupt in done.interrupts:
                await keel.decide(session, interrupt.id, "approve")
            done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
        state = await keel.state(session)
    assert done.status == "completed", done
    assert sorted(set(out.read_text().splitlines())) == values
    created = [
        e
        for e in state.events
        if e.type == "interrupt_created" and e.detail.get("kind") == "approval"
    ]
    assert len(created) <= 1  # the first call only (older events may have been dropped)
    assert [e for e in state.events if e.type == "standing_approval_used"]
    assert state.run > 1, "the turn should have continued as new"
    assert [s.tool for s in state.pending.standing] == ["guarded_record"]


async def test_a_tool_that_asks_every_time_cannot_be_stood_down(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    session = sid()
    async with run_worker():
        config = script(gated("guarded_always", out, "1", "2"))
        ack = await keel.prompt(session, "go", config=config)
        first = (await parked(keel, session, ack.turn_id)).interrupts[0]
        with pytest.raises(RequestRejected, match="asks a person for every call"):
            await keel.decide(session, first.id, "approve", always=True)
        with pytest.raises(RequestRejected, match="only an approval can stand"):
            await keel.decide(session, first.id, "deny", always=True)
        await keel.decide(session, first.id, "approve")
        second = (await parked(keel, session, ack.turn_id)).interrupts[0]
        assert second.id != first.id  # asked again
        await keel.decide(session, second.id, "approve")
        await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert out.read_text().splitlines() == ["1", "2"]


async def test_signed_sessions_refuse_an_unsigned_or_upgraded_always(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
) -> None:
    k = keys(tmp_path, "alice")
    alice = k["alice"][0]
    out = tmp_path / "out.txt"
    config = script(
        gated("guarded_record", out, "1", "2", "3"),
        approvers=["alice"],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        first = (await parked(keel, session, ack.turn_id)).interrupts[0]
        with pytest.raises(RequestRejected, match="not signed"):
            await keel.decide(session, first.id, "approve", approver="alice", always=True)
        # a signature of a one-call approval, with always added on the way: refused
        plain = alice.sign(session, first.id, "decide", "approve", None, "alice")
        upgraded = {
            "interrupt_id": first.id,
            "decision": "approve",
            "approver": "alice",
            "signature": plain,
            "always": True,
        }
        handle = keel.client.get_workflow_handle(session)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("decide", upgraded)
        raw = await temporal_cli(
            temporal_env,
            "workflow", "update", "execute", "-w", session, "--name", "decide",
            "--input", json.dumps(upgraded),
        )  # fmt: skip
        assert raw.returncode != 0 and "does not verify" in raw.stderr, raw.stderr
        await handle.signal("decide", upgraded)
        # nobody but alice may revoke (a raw update as mallory)
        await keel.decide(session, first.id, "approve", approver="alice", key=alice, always=True)
        record = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        raw = await temporal_cli(
            temporal_env,
            "workflow", "update", "execute", "-w", session, "--name", "revoke",
            "--input", json.dumps({"tool": "guarded_record", "by": "mallory"}),
        )  # fmt: skip
        assert raw.returncode != 0 and "not an approver" in raw.stderr, raw.stderr
        [standing] = await keel.policy(session)
    assert record.status == "completed", record
    assert out.read_text().splitlines() == ["1", "2", "3"]
    assert standing.granted_by == "alice" and standing.key_fingerprint == alice.fingerprint


async def test_always_also_approves_the_calls_waiting_beside_it(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """Two calls of a tool wait in one cycle: "approve always" on one lets the other go too,
    when it passes the tests; a waiting call that does not still asks."""
    out = tmp_path / "out.txt"
    steps = [
        respond(
            tool_use("a", "guarded_record", path=str(out), value="docs/1"),
            tool_use("b", "guarded_record", path=str(out), value="docs/2"),
            tool_use("c", "guarded_record", path=str(out), value="src/3"),
            stop="tool_use",
        ),
        respond(text("done")),
    ]
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps))
        for _ in range(100):
            record = await keel.turn(session, ack.turn_id)
            if len(record.interrupts) == 3:
                break
            await asyncio.sleep(0.1)
        by_value = {i.tool_use.input["value"]: i for i in record.interrupts}
        when = parse_conditions('value startswith "docs/"')
        await keel.decide(session, by_value["docs/1"].id, "approve", always=True, always_when=when)
        left = (await keel.pending(session)).interrupts
        assert [i.tool_use.input["value"] for i in left] == ["src/3"]
        await keel.decide(session, left[0].id, "deny", reason="not src")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"
    assert sorted(out.read_text().splitlines()) == ["docs/1", "docs/2"]
