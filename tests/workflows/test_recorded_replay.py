"""Replay, fork and export of recorded sessions: no tool runs, the divergence is named.

A recorded session runs tools (one writes a line to a file each time it runs); its
replay with another model is answered from the recording, and the file proves nothing ran.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from keel import KeelClient, RequestRejected
from keel.workflows.messages import Message, tool_uses
from keel.workflows.replay_contracts import REPLAY_DIVERGED
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history


def sid() -> str:
    return f"rp-{uuid.uuid4().hex[:10]}"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def no_dangling(messages: list[Message]) -> None:
    for i, message in enumerate(messages):
        ids = [u.toolUseId for u in tool_uses(message)]
        if ids:
            answered = [b.toolResult.toolUseId for b in messages[i + 1].content if b.toolResult]
            assert answered[: len(ids)] == ids


async def recorded_session(keel: KeelClient, script: Script, ledger: Path, **config: Any) -> str:
    """Two turns: a write (a line in ``ledger``) and a lookup, then a read and an answer."""
    session = sid()
    cfg = script(
        [
            respond(tool_use("a1", "record", path=str(ledger), value="refund 7"), stop="tool_use"),
            respond(tool_use("a2", "echo", text="ok?"), stop="tool_use"),
            respond(text("refunded 7")),
            respond(tool_use("b1", "add", a=2, b=3), stop="tool_use"),
            respond(text("five")),
        ],
        **config,
    )
    first = await keel.run(session, "refund order 7", config=cfg, timeout_s=30)
    assert first.status == "completed", first.error
    second = await keel.run(session, "what is 2 + 3?", timeout_s=30)
    assert second.status == "completed", second.error
    assert lines(ledger) == ["refund 7"]
    return session


async def test_replay_same_calls_runs_no_tool(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, model_log: Any
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with run_worker():
        session = await recorded_session(keel, script, ledger)
        # the new model makes the same calls (its ids differ; its words too)
        replay_model = script(
            [
                respond(
                    tool_use("n1", "record", value="refund 7", path=str(ledger)), stop="tool_use"
                ),
                respond(tool_use("n2", "echo", text="ok?"), stop="tool_use"),
                respond(text("done: refund 7")),
                respond(tool_use("n3", "add", b=3, a=2), stop="tool_use"),
                respond(text("2 + 3 = 5")),
            ]
        ).model
        before = len(model_log())
        report = await keel.replay(session, model=replay_model, turn_timeout_s=30)
        assert not report.diverged and report.divergence is None, report
        assert [t.replayed_answer for t in report.turns] == ["done: refund 7", "2 + 3 = 5"]
        assert [t.recorded_answer for t in report.turns] == ["refunded 7", "five"]
        assert [[u.name for u in t.replayed_calls] for t in report.turns] == [
            ["record", "echo"],
            ["add"],
        ]
        assert lines(ledger) == ["refund 7"], "a replay ran the write tool"
        # the new model read the recorded results
        requests = model_log()[before:]
        last = requests[-1]["messages"]
        results = [b["toolResult"] for m in last for b in m["content"] if "toolResult" in b]
        assert any("recorded refund 7" in str(r) for r in results), results
        state = await keel.state(report.replay_session)
        no_dangling(state.messages)
        assert state.status == "closed"
        events = [e.type for e in (await keel.state(report.replay_session)).events]
        assert "tool_started" not in events and events.count("replay_answered") == 3
        await save_history(keel.client, report.replay_session, "replay_answered")
        # the recorded session is unchanged
        assert len((await keel.state(session)).turns) == 2


async def test_replay_other_call_diverges(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with run_worker():
        session = await recorded_session(keel, script, ledger)
        replay_model = script(
            [
                respond(
                    tool_use("n1", "record", path=str(ledger), value="refund 700"),
                    stop="tool_use",
                ),
                respond(text("refunded 700")),
            ]
        ).model
        report = await keel.replay(session, model=replay_model, turn_timeout_s=30)
        assert report.diverged
        d = report.divergence
        assert d is not None and d.turn == 1 and d.index == 0
        assert d.recorded is not None and d.recorded.input["value"] == "refund 7"
        assert d.replayed.input["value"] == "refund 700"
        assert len(report.turns) == 1 and report.turns[0].stop_reason == REPLAY_DIVERGED
        assert lines(ledger) == ["refund 7"], "a diverged call ran"
        as_json = report.as_json()
        assert as_json["diverged"] is True and as_json["divergence"]["replayed"] == {
            "name": "record",
            "input": {"path": str(ledger), "value": "refund 700"},
        }
        state = await keel.state(report.replay_session)
        no_dangling(state.messages)
        await save_history(keel.client, report.replay_session, "replay_diverged")


async def test_live_read_runs_reads_never_writes(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with run_worker():
        session = await recorded_session(keel, script, ledger)
        # an unmatched read runs live; then an unmatched write diverges, even so
        replay_model = script(
            [
                respond(tool_use("n1", "echo", text="live!"), stop="tool_use"),
                respond(
                    tool_use("n2", "record", path=str(ledger), value="refund 8"),
                    stop="tool_use",
                ),
                respond(text("never")),
            ]
        ).model
        report = await keel.replay(session, model=replay_model, live_read=True, turn_timeout_s=30)
        assert report.diverged and report.divergence is not None
        assert report.divergence.replayed.name == "record" and report.divergence.index == 1
        assert lines(ledger) == ["refund 7"]
        state = await keel.state(report.replay_session)
        assert state.replay is not None and state.replay.live == ["n1"]
        echoed = [
            b.toolResult
            for m in state.messages
            for b in m.content
            if b.toolResult is not None and b.toolResult.toolUseId == "n1"
        ]
        assert echoed and "live!" in str(echoed[0].content), echoed


async def test_recorded_approval_is_not_asked_again(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    session = sid()
    async with run_worker():
        cfg = script(
            [
                respond(
                    tool_use("g1", "guarded_record", path=str(ledger), value="v"),
                    stop="tool_use",
                ),
                respond(text("recorded")),
            ]
        )
        record = await keel.run(session, "write v", config=cfg, timeout_s=30)
        assert record.status == "awaiting_human"
        interrupt = (await keel.pending(session)).interrupts[0]
        await keel.decide(session, interrupt.id, "approve", approver="alice")
        done = await keel.wait_turn(session, 1, timeout_s=30)
        assert done.status == "completed"
        replay_model = script(
            [
                respond(
                    tool_use("x1", "guarded_record", path=str(ledger), value="v"),
                    stop="tool_use",
                ),
                respond(text("again")),
            ]
        ).model
        report = await keel.replay(session, model=replay_model, turn_timeout_s=30)
        assert not report.diverged and report.turns[0].status == "completed"
        assert lines(ledger) == ["v"]
        assert not (await keel.state(report.replay_session)).pending.interrupts


async def test_fork_at_a_prefix(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with run_worker():
        session = await recorded_session(keel, script, ledger)
        original = await keel.state(session)
        # turn 1: prompt, use, results, use, results, answer; turn 2: prompt, use, results, answer
        assert len(original.messages) == 10
        fork = await keel.fork(session, 6, new_session=sid())
        forked = await keel.state(fork)
        assert [m.model_dump() for m in forked.messages] == [
            m.model_dump() for m in original.messages[:6]
        ]
        assert forked.turns == [] and lines(ledger) == ["refund 7"]
        assert forked.config.approvers == original.config.approvers
        with pytest.raises(RequestRejected, match=r"message 4 \(an assistant message\)"):
            await keel.fork(session, 4)
        with pytest.raises(RequestRejected, match="out of range"):
            await keel.fork(session, 99)
        after = await keel.state(session)
        assert [m.model_dump() for m in after.messages] == [
            m.model_dump() for m in original.messages
        ]


async def test_export_splits_turns(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with run_worker():
        session = await recorded_session(keel, script, ledger)
        case = await keel.export_case(session)
    assert [t.turn for t in case.turns] == [1, 2]
    assert case.turns[0].prompt[0].text == "refund order 7"
    assert [c.name for c in case.turns[0].calls] == ["record", "echo"]
    assert case.turns[0].calls[0].result.content[0].text == "recorded refund 7"
    assert case.turns[1].answer == "five" and case.messages == []
