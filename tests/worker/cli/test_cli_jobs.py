"""Jobs: ``keel run --detach``, ``keel wait``, ``keel schedule`` and ``--notify``, end to end.

The ``keel`` commands run in this process (``run_cli`` in a thread, its output captured), so
that a dozen of them cost no interpreter start each; the worker is an in-process one on the
test's task queue, and the server the tests' dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, KeelSchedules
from keel.worker.cli.console import turn_json
from keel.worker.cli.main import run_cli
from keel.worker.client.schedules import ScheduleSummary
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.webhooks import receiver

T = TypeVar("T")


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Cli = Callable[..., Awaitable[Ran]]


@pytest.fixture
def cli(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    """``await cli("run", ...)``: one ``keel`` command against the tests' server."""
    for name in list(os.environ):
        if name.startswith(("TEMPORAL_", "KEEL_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    monkeypatch.setenv("KEEL_TASK_QUEUE", task_queue)
    monkeypatch.setenv("KEEL_STORE", str(tmp_path / "store"))

    async def run(*args: str) -> Ran:
        capsys.readouterr()
        code = await asyncio.to_thread(run_cli, list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


async def until(probe: Callable[[], Awaitable[T | None]], timeout_s: float = 30) -> T:
    """Poll ``probe`` until it answers something; that answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await probe()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out polling"
        await asyncio.sleep(0.2)


def approval_script(tmp_path: Path) -> str:
    asked = tool_use("g1", "guarded_record", path=str(tmp_path / "out.txt"), value="v")
    return write_script(
        tmp_path / f"approval-{uuid.uuid4().hex[:6]}.json",
        [respond(text("need a human"), asked, stop="tool_use"), respond(text("tidied"))],
    )


async def test_detach_then_wait_prints_what_run_would(
    cli: Cli, run_worker: RunWorker, keel: KeelClient, tmp_path: Path
) -> None:
    scripts = {
        "done": [respond(text("all done")), respond(text("again done"))],
        "failed": [respond(text("cut"), stop="max_tokens")],
        "slow": [respond(text("late"), delay_s=5)],
    }
    models = {k: write_script(tmp_path / f"{k}.json", v) for k, v in scripts.items()}
    models["interrupted"] = approval_script(tmp_path)
    sessions = {k: f"d-{k}-{uuid.uuid4().hex[:6]}" for k in models}
    async with run_worker():
        for kind, session in sessions.items():
            started = await cli(
                "run", "--detach", "--json", "--session", session, "--model", models[kind],
                "--tools", SAMPLE_TOOLS, "go",
            )  # fmt: skip
            assert started.code == 0, started.err
            assert started.json() == {
                "session": session,
                "workflow_id": session,
                "turn": 1,
                "status": "running",
            }
            assert f"keel wait {session}" in started.err

        done = await cli("wait", sessions["done"], "--json")
        assert done.code == 0, done.err
        record = await keel.turn(sessions["done"], 1)
        assert done.json() == turn_json(sessions["done"], record)  # what run --json prints
        assert done.json()["message"]["content"] == [{"text": "all done"}]

        # a running session: the prompt is an update, and the next turn is the one waited for
        again = await cli("run", "--detach", "--session", sessions["done"], "next")
        assert again.code == 0 and again.out == sessions["done"] + "\n", again.err
        waited = await cli("wait", sessions["done"])
        assert waited.code == 0 and waited.out == "again done\n", waited.err
        assert f"session {sessions['done']}; go on with:" in waited.err

        interrupted = await cli("wait", sessions["interrupted"], "--json")
        assert interrupted.code == 3, interrupted.err
        out = interrupted.json()
        assert out["status"] == "interrupted" and out["interrupts"][0]["kind"] == "approval"
        human = await cli("wait", sessions["interrupted"], "--no-input")
        assert human.code == 3
        assert f"keel approve {sessions['interrupted']} {out['interrupts'][0]['id']}" in human.out

        failed = await cli("wait", sessions["failed"], "--json")
        assert failed.code == 1, failed.err
        assert failed.json()["status"] == "failed" and failed.json()["stop_reason"] == "max_tokens"

        slow = await cli("wait", sessions["slow"], "--timeout", "0.5")
        assert slow.code == 124 and slow.out == ""
        assert f"timed out after 0.5 s: turn 1 of session {sessions['slow']} still runs" in slow.err

    missing = await cli("wait", "no-such-session")
    assert missing.code == 2 and "no session 'no-such-session'" in missing.err


async def test_detach_and_schedules_refuse_a_server_that_dies_with_the_command(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS")
    model = write_script(tmp_path / "m.json", [respond(text("x"))])
    for command in (
        ("run", "--detach", "--model", model, "go"),
        ("schedule", "create", "nightly", "--every", "1h", "--model", model, "go"),
    ):
        refused = await cli(*command)
        assert refused.code == 2 and refused.out == ""
        assert "outlive this command" in refused.err and "`keel dev`" in refused.err
    bad = await cli("schedule", "create", "n", "--every", "soon", "--model", model, "go")
    assert bad.code == 2 and "--every 'soon'" in bad.err


async def test_scheduled_job_with_approval_and_notification_end_to_end(
    cli: Cli, run_worker: RunWorker, keel: KeelClient, client: Client, task_queue: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    name = f"job-{uuid.uuid4().hex[:6]}"
    schedules = KeelSchedules(client, task_queue)
    with receiver() as hook:
        agent = tmp_path / "nightly.toml"
        agent.write_text(
            f'model = "{approval_script(tmp_path)}"\n'
            f'tools = ["{SAMPLE_TOOLS}"]\n'
            f'notify = ["{hook.url}"]\n'
        )
        created = await cli(
            "schedule", "create", name, "--every", "1s", "--agent", str(agent), "--json", "tidy"
        )
        assert created.code == 0, created.err
        made = created.json()
        assert made["name"] == name and made["spec"] == "every 1s" and made["overlap"] == "skip"
        assert made["prompt"] == "tidy"

        async with run_worker():

            async def first_waits() -> ScheduleSummary | None:
                s = await schedules.describe(name)
                return s if s.running and s.skipped else None

            # the first job waits for approval; firings meanwhile are skipped (overlap skip)
            waiting = await until(first_waits)
            [first] = waiting.running or []
            assert re.fullmatch(rf"{name}-\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first)
            [posted] = await hook.arrival(1)
            event = posted.event
            assert event["session"] == first and event["event"] == "interrupt"
            # the approver runs the command the notification carries
            command = event["command"].split()
            assert command[:3] == ["keel", "approve", first]
            approved = await cli(*command[1:], "--json")
            assert approved.code == 0, approved.err
            assert approved.json()["message"]["content"] == [{"text": "tidied"}]

            async def fired_twice() -> ScheduleSummary | None:
                s = await schedules.describe(name)
                return s if len(s.recent) >= 2 and s.running else None

            second = (await until(fired_twice)).running or []
            assert second and second[0] != first and second[0].startswith(name + "-")

            paused = await cli("schedule", "pause", name, "--note", "holiday")
            assert paused.code == 0 and paused.out == f"schedule {name} paused\n"
            before = (await schedules.describe(name)).fired or 0
            # a session's id is NAME-<time in seconds>: a trigger in the second of the last
            # firing would name the same workflow, and Temporal drops it
            await asyncio.sleep(1.1)
            triggered = await cli("schedule", "trigger", name, "--overlap", "allow")
            assert triggered.code == 0, triggered.err

            async def fired_again() -> ScheduleSummary | None:
                s = await schedules.describe(name)
                return s if (s.fired or 0) > before else None

            assert (await until(fired_again)).paused

            shown = await cli("show", first, "--json")
            assert shown.code == 0, shown.err
            assert shown.json()["status"] == "closed"  # a job is one turn: its session closed
            described = await cli("schedule", "describe", name)
            assert "overlap skip" in described.out and "paused (holiday)" in described.out

            async def listed() -> list[str] | None:
                found = await schedules.list()
                return [s.name for s in found if s.name == name and s.paused] or None

            await until(listed)
            listing = await cli("schedule", "list", "--json")
            [mine] = [s for s in listing.json() if s["name"] == name]
            assert mine["paused"] and mine["spec"] == "every 1s"

            async def by_schedule() -> list[str] | None:
                found = await keel.list_sessions()
                return [s.session for s in found if s.schedule == name and s.session == first]

            await until(by_schedule)
            sessions = await cli("sessions", "--json")
            mine_sessions = [s for s in sessions.json() if s["schedule"] == name]
            assert first in {s["session"] for s in mine_sessions}
            assert all(s["session"].startswith(name + "-") for s in mine_sessions)

        deleted = await cli("schedule", "delete", name)
        assert deleted.code == 0, deleted.err
        gone = await cli("schedule", "describe", name)
        assert gone.code == 2 and f"no schedule {name!r}" in gone.err
        ended = [e for e in hook.events("turn_ended") if e["session"] == first]
        assert ended and ended[0]["status"] == "completed" and ended[0]["answer"] == "tidied"


async def test_schedule_overlap_policy_is_kept(cli: Cli, tmp_path: Path) -> None:
    model = write_script(tmp_path / "m.json", [respond(text("x"))])
    name = f"buf-{uuid.uuid4().hex[:6]}"
    created = await cli(
        "schedule", "create", name, "--every", "1h30m", "--overlap", "buffer", "--model", model,
        "--json", "go",
    )  # fmt: skip
    assert created.code == 0, created.err
    assert created.json()["overlap"] == "buffer" and created.json()["spec"] == "every 90m"
    again = await cli("schedule", "create", name, "--every", "1h", "--model", model, "go")
    assert again.code == 2 and f"schedule {name!r} exists already" in again.err
    bad = await cli("schedule", "create", f"{name}x", "--cron", "99 * * * *", "--model", model, "x")
    assert bad.code == 2 and "Temporal refused schedule" in bad.err
    assert (await cli("schedule", "delete", name)).code == 0
