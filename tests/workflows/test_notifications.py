"""Notifications (``SessionConfig.notify``) to a local HTTP receiver, on a real dev server."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import uuid
from pathlib import Path

import pytest

from keel import KeelClient, SessionConfig, SubAgent
from keel.worker.cli.follow import event_line
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history
from tests.helpers.webhooks import receiver

SECRET = "s3cret-for-tests"


def sid() -> str:
    return f"n-{uuid.uuid4().hex[:10]}"


async def test_interrupt_and_turn_end_payloads_signed(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_NOTIFY_SECRET", SECRET)  # read by the activity, on this worker
    target = tmp_path / "out.txt"
    asked = tool_use("g1", "guarded_record", path=str(target), value="v")
    answer = "done " + "x" * 600
    session = sid()
    with receiver() as hook:
        config = script(
            [respond(text("need a human"), asked, stop="tool_use"), respond(text(answer))],
            notify=[hook.url],
        )
        async with run_worker():
            waiting = await keel.run(session, "go", config=config, timeout_s=30)
            [interrupt] = waiting.interrupts
            [posted] = await hook.arrival(1)
            await keel.decide(session, interrupt.id, "approve")
            done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
            received = await hook.arrival(2)
            await keel.close(session)
            await keel.handle(session).result()
            state = await keel.state(session)
        await save_history(keel.client, session, "notify_approval")
    assert done.status == "completed"
    event = posted.event
    assert event == {
        "id": f"{session}/interrupt/{interrupt.id}",
        "event": "interrupt",
        "session": session,
        "workflow_id": session,
        "turn": 1,
        "interrupt": interrupt.id,
        "kind": "approval",
        "tool": "guarded_record",
        "tool_use_id": "g1",
        "name": "guarded_record",
        "input": {"path": str(target), "value": "v"},
        "reason": "tool 'guarded_record' requires approval",
        "expires_at": None,
        "command": f"keel approve {session} {interrupt.id}",
        "deny_command": f"keel deny {session} {interrupt.id} --reason '...'",
        "resolve_command": None,
        "at": event["at"],
        "text": f"Keel session {session} waits for approval: tool 'guarded_record' requires "
        f'approval: guarded_record {{"path": "{target}", "value": "v"}}. '
        f"Approve: keel approve {session} {interrupt.id}",
    }
    ended = received[1].event
    assert {k: v for k, v in ended.items() if k not in ("at", "text")} == {
        "id": f"{session}/turn/1",
        "event": "turn_ended",
        "session": session,
        "workflow_id": session,
        "turn": 1,
        "status": "completed",
        "stop_reason": "end_turn",
        "usage": {"inputTokens": 20, "outputTokens": 20, "totalTokens": 40},
        "answer": answer[:500],
        "error": None,
    }
    assert ended["text"].startswith(f"Keel session {session}: turn 1 completed (end_turn): done x")
    assert len(ended["text"]) < 300  # one line for Slack, not the whole answer
    for got in received:
        headers = {k.lower(): v for k, v in got.headers.items()}
        assert headers["content-type"] == "application/json"
        assert headers["x-keel-event"] == got.event["event"]
        assert headers["x-keel-delivery"] == got.event["id"]
        assert headers["x-keel-attempt"] == "1"
        stamp = headers["x-keel-timestamp"]
        assert abs(int(stamp) - time.time()) < 60
        mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + got.body, hashlib.sha256)
        assert hmac.compare_digest(headers["x-keel-signature"], "sha256=" + mac.hexdigest())
        forged = hmac.new(b"wrong", stamp.encode() + b"." + got.body, hashlib.sha256)
        assert headers["x-keel-signature"] != "sha256=" + forged.hexdigest()
    sent = [e.detail for e in state.events if e.type == "notification_sent"]
    assert sent == [
        {"event": "interrupt", "to": hook.url.rsplit("/", 1)[0], "status": 200, "attempt": 1},
        {"event": "turn_ended", "to": hook.url.rsplit("/", 1)[0], "status": 200, "attempt": 1},
    ]


async def test_failing_receiver_gets_each_attempt_and_the_session_goes_on(
    keel: KeelClient, run_worker: RunWorker, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KEEL_NOTIFY_SECRET", raising=False)
    session = sid()
    with receiver(fail_first=3) as hook:
        config = script([respond(text("one")), respond(text("two"))], notify=[hook.url])
        async with run_worker():
            first = await keel.run(session, "first", config=config, timeout_s=30)
            # the next turn runs while the first one's notification is still being retried
            second = await keel.run(session, "second", timeout_s=30)
            assert len(hook.received) < 4
            await hook.arrival(8, timeout_s=30)  # 4 attempts for each turn
            for _ in range(100):
                state = await keel.state(session, include_messages=False)
                sent = [e.detail for e in state.events if e.type == "notification_sent"]
                if len(sent) == 2:
                    break
                await asyncio.sleep(0.1)
    assert first.status == second.status == "completed"
    by_turn = [(r.event["turn"], r.headers["X-Keel-Attempt"]) for r in hook.received]
    assert sorted(by_turn) == [(t, str(a)) for t in (1, 2) for a in range(1, 5)]
    assert {r.headers["X-Keel-Delivery"] for r in hook.received if r.event["turn"] == 1} == {
        f"{session}/turn/1"
    }
    assert "X-Keel-Signature" not in hook.received[0].headers  # no secret, no signature
    assert [(d["event"], d["attempt"]) for d in sent] == [("turn_ended", 4)] * 2
    assert not [e for e in state.events if e.type == "notification_failed"]


async def test_receiver_that_never_answers_does_not_hold_the_session(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    session = sid()
    with receiver(hang=True) as hook:
        config = script([respond(text("one")), respond(text("two"))], notify=[hook.url])
        async with run_worker():
            started = time.monotonic()
            first = await keel.run(session, "first", config=config, timeout_s=30)
            await hook.arrival(1)
            second = await keel.run(session, "second", timeout_s=30)
            elapsed = time.monotonic() - started
            await hook.arrival(2)
    assert first.status == second.status == "completed"
    assert elapsed < 8  # well inside one attempt's HTTP timeout (10 s)


def test_notify_urls_must_be_http() -> None:
    with pytest.raises(ValueError, match="not an http"):
        SessionConfig(model="scripted:x.json", notify=["file:///etc/passwd"])
    with pytest.raises(ValueError, match="not an http"):
        SessionConfig(model="scripted:x.json", notify=["http://user@evil.example/"])
    assert SessionConfig(model="m:x", notify=["https://hooks.example/T/1"]).notify


async def test_undelivered_notification_survives_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    session = sid()
    with receiver(fail_first=2) as hook:
        config = script(
            [respond(text("one")), respond(text("two"))],
            notify=[hook.url],
            continue_as_new_events=20,
        )
        async with run_worker():
            await keel.run(session, "first", config=config, timeout_s=30)
            await hook.arrival(1)
            # the next prompt lands on a full history: the session continues-as-new while
            # turn 1's notification waits for its retry
            await keel.run(session, "second", timeout_s=30)
            for _ in range(150):
                state = await keel.state(session, include_messages=False)
                sent = [e.detail for e in state.events if e.type == "notification_sent"]
                if len(sent) == 2:
                    break
                await asyncio.sleep(0.1)
        await save_history(keel.client, session, "notify_across_continue_as_new")
    assert state.run >= 2
    assert [d["event"] for d in sent] == ["turn_ended", "turn_ended"]
    turn1 = [r for r in hook.received if r.headers["X-Keel-Delivery"] == f"{session}/turn/1"]
    attempts = [r.headers["X-Keel-Attempt"] for r in turn1]
    assert len(turn1) >= 3  # two refused, then taken
    assert attempts.count("1") >= 2  # the next run posted it again, from its first attempt
    assert {r.body for r in turn1} == {turn1[0].body}  # the same event every time


async def test_a_sub_agents_approval_is_announced_by_the_parent(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    asked = tool_use("g1", "guarded_record", path=str(tmp_path / "w.txt"), value="v")
    writer = script([respond(asked, stop="tool_use"), respond(text("written"))])
    session = sid()
    with receiver() as hook:
        parent = script(
            [
                respond(tool_use("w1", "writer", prompt="write it"), stop="tool_use"),
                respond(text("all done")),
            ],
            agents={"writer": SubAgent(description="Writes.", config=writer)},
            notify=[hook.url],
        )
        async with run_worker():
            ack = await keel.prompt(session, "go", config=parent)
            [posted] = await hook.arrival(1)
            event = posted.event
            assert event["session"] == session and event["tool"] == "guarded_record"
            assert event["reason"].startswith("[sub-agent writer]")
            # the command it carries is the one that decides it: through the parent
            approve = event["command"].split()
            assert approve[:3] == ["keel", "approve", session]
            await keel.decide(session, approve[3], "approve")
            done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
            await hook.arrival(2)
    assert done.status == "completed"
    assert [e["event"] for e in hook.events()] == ["interrupt", "turn_ended"]


async def test_a_refused_notification_is_logged_and_shown_not_raised(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    session = sid()
    with receiver(status=404) as hook:
        config = script([respond(text("one")), respond(text("two"))], notify=[hook.url])
        async with run_worker():
            first = await keel.run(session, "first", config=config, timeout_s=30)
            for _ in range(100):
                state = await keel.state(session, include_messages=False)
                failed = [e for e in state.events if e.type == "notification_failed"]
                if failed:
                    break
                await asyncio.sleep(0.1)
            second = await keel.run(session, "second", timeout_s=30)  # the session goes on
    assert first.status == second.status == "completed"
    assert len(hook.received) >= 1 and hook.received[0].headers["X-Keel-Attempt"] == "1"
    [event] = failed
    assert event.detail["event"] == "turn_ended" and "refused: HTTP 404" in event.detail["error"]
    line = event_line(event)  # as keel watch prints it
    assert "notification_failed" in line and "not delivered" in line and "HTTP 404" in line
    assert "/hook" not in line  # the URL's path (a webhook's secret) stays out of the log
