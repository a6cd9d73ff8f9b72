"""Keel's commands agree with Temporal's after an operator ends a session with Temporal's CLI.

``temporal workflow terminate`` gives the session no word; ``cancel`` does (the session
records it). Either way every reading command says how it ended, offers no command that
could no longer work, and ``keel wait`` / ``watch`` end with exit 4. ``keel close`` ends a
session as Keel does (Temporal: completed), ``keel sessions --open`` no longer lists it, and a
reset session is listed once.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from keel.worker.server.devserver import find_temporal_cli
from tests.helpers.cli import keel
from tests.worker.cli.test_cli_watch import approval_script, run_args

EXIT_ENDED = 4


def temporal(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The raw ``temporal`` CLI against the test's server, as an operator runs it."""
    done = subprocess.run(
        [find_temporal_cli() or "temporal", *args, "--address", env["TEMPORAL_ADDRESS"]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def describe_status(env: dict[str, str], session: str) -> str:
    out = temporal(env, "workflow", "describe", "--workflow-id", session, "--output", "json")
    info = json.loads(out.stdout)["workflowExecutionInfo"]
    return str(info["status"])


def until_status(env: dict[str, str], session: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while describe_status(env, session) != status:
        assert time.monotonic() < deadline, (session, status)
        time.sleep(0.2)


def waiting_session(env: dict[str, str], tmp_path: Path) -> tuple[str, str]:
    """A session whose turn waits for approval: its id and the interrupt's."""
    session = f"truth-{uuid.uuid4().hex[:8]}"
    waiting = keel(
        *run_args(session, approval_script(tmp_path, tmp_path / "out.txt")),
        "--json",
        "go",
        env=env,
    )
    assert waiting.returncode == 3, waiting.stderr
    return session, json.loads(waiting.stdout)["interrupts"][0]["id"]


def listed(env: dict[str, str], *flags: str) -> list[dict[str, Any]]:
    done = keel("sessions", "--json", *flags, env=env)
    assert done.returncode == 0, done.stderr
    entries: list[dict[str, Any]] = json.loads(done.stdout)
    return entries


def sessions_say(env: dict[str, str], session: str, **expect: Any) -> list[dict[str, Any]]:
    """Poll ``keel sessions --json`` (visibility lags) until the session's rows match."""
    deadline = time.monotonic() + 20
    while True:
        rows = [e for e in listed(env) if e["session"] == session]
        if len(rows) == 1 and all(rows[0][k] == v for k, v in expect.items()):
            return rows
        assert time.monotonic() < deadline, (session, expect, rows)
        time.sleep(0.3)


def test_after_terminate_every_reading_command_says_terminated(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    env = server_env
    session, interrupt = waiting_session(env, tmp_path)
    temporal(env, "workflow", "terminate", "--workflow-id", session, "--reason", "operator stop")
    said = "the session was terminated in Temporal: operator stop"

    show = keel("show", session, env=env)
    assert show.returncode == 0, show.stderr
    assert "[turn 1 cancelled: 1 model calls" in show.stdout and said in show.stdout
    assert show.stdout.rstrip().splitlines()[-1].startswith("[terminated;")
    shown = json.loads(keel("show", session, "--json", env=env).stdout)
    assert shown["status"] == "terminated"

    pending = keel("pending", session, env=env)
    assert pending.returncode == 0, pending.stderr
    assert pending.stdout.strip() == f"no pending interrupts in session {session}: {said}"
    assert "keel approve" not in pending.stdout + pending.stderr
    as_json = json.loads(keel("pending", session, "--json", env=env).stdout)
    assert (as_json["status"], as_json["interrupts"], as_json["ended"]) == ("terminated", [], said)

    wait = keel("wait", session, "--json", env=env)
    assert wait.returncode == EXIT_ENDED, wait.stderr
    turn = json.loads(wait.stdout)
    assert (turn["status"], turn["stop_reason"], turn["error"]) == (
        "cancelled",
        "session_terminated",
        said,
    )
    assert turn["interrupts"] == []
    human = keel("wait", session, env=env)
    assert human.returncode == EXIT_ENDED and said in human.stderr
    assert "keel approve" not in human.stdout + human.stderr

    for flags in (["--until-idle"], ["--until-idle", "--json"], []):
        watch = keel("watch", session, *flags, env=env, timeout=60)
        assert watch.returncode == EXIT_ENDED, (flags, watch.stderr)
        assert said in watch.stderr, (flags, watch.stderr)

    approve = keel("approve", session, interrupt, env=env)
    assert approve.returncode == 2 and "closed (terminated)" in approve.stderr

    sessions_say(env, session, workflow_status="terminated")
    assert session not in {e["session"] for e in listed(env, "--open")}


def test_after_a_temporal_cancel_the_session_recorded_it(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    env = server_env
    session, _ = waiting_session(env, tmp_path)
    temporal(env, "workflow", "cancel", "--workflow-id", session)
    until_status(env, session, "WORKFLOW_EXECUTION_STATUS_CANCELED")

    shown = json.loads(keel("show", session, "--json", env=env).stdout)
    assert shown["status"] == "cancelled"
    pending = keel("pending", session, env=env)
    assert "the session was cancelled in Temporal" in pending.stdout
    watch = keel("watch", session, "--json", env=env)
    assert watch.returncode == EXIT_ENDED, watch.stderr
    events = [json.loads(line) for line in watch.stdout.splitlines()]
    # the session's own record: its interrupt cancelled, its turn ended, the session closed
    assert [e["type"] for e in events[-3:]] == ["interrupt_decided", "turn_ended", "session_closed"]
    assert events[-2]["detail"]["stop_reason"] == "session_cancelled"
    wait = keel("wait", session, env=env)
    assert wait.returncode == EXIT_ENDED and "cancelled in Temporal" in wait.stderr


def test_close_ends_a_waiting_session_and_it_leaves_the_open_list(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    env = server_env
    session, _ = waiting_session(env, tmp_path)
    sessions_say(env, session, workflow_status="running")
    assert session in {e["session"] for e in listed(env, "--open")}

    closed = keel("close", session, "--reason", "abandoned", "--json", env=env)
    assert closed.returncode == 0, closed.stderr
    assert json.loads(closed.stdout) == {
        "session": session,
        "status": "closed",
        "changed": True,
        "turns": 1,
        "usage": json.loads(closed.stdout)["usage"],
    }
    assert describe_status(env, session) == "WORKFLOW_EXECUTION_STATUS_COMPLETED"
    shown = json.loads(keel("show", session, "--json", env=env).stdout)
    assert shown["status"] == "closed"
    [turn] = shown["turns"]
    assert turn["status"] == "cancelled"

    again = keel("close", session, env=env)
    assert again.returncode == 0 and "had already ended" in again.stdout
    missing = keel("close", f"nosuch-{uuid.uuid4().hex[:6]}", env=env)
    assert missing.returncode == 2 and "no session" in missing.stderr
    sessions_say(env, session, workflow_status="completed")
    assert session not in {e["session"] for e in listed(env, "--open")}


def test_a_reset_session_is_listed_once(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    env = server_env
    session, _ = waiting_session(env, tmp_path)
    temporal(
        env, "workflow", "reset", "--workflow-id", session, "--type", "FirstWorkflowTask",
        "--reason", "try again",
    )  # fmt: skip
    rows = sessions_say(env, session, workflow_status="running")
    assert rows[0]["status"] in ("running", "idle", None)


def test_run_json_gives_the_message_whose_tool_waits(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    from tests.helpers.scripts import respond, text, tool_use, write_script

    model = write_script(
        tmp_path / "two.json",
        [
            respond(text("first, a sum"), tool_use("a1", "add", a=1, b=2), stop="tool_use"),
            respond(
                text("now the file"),
                tool_use("g1", "guarded_record", path=str(tmp_path / "o.txt"), value="x"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
    )
    session = f"truth-{uuid.uuid4().hex[:8]}"
    waiting = keel(*run_args(session, model), "--json", "go", env=server_env)
    assert waiting.returncode == 3, waiting.stderr
    message = json.loads(waiting.stdout)["message"]
    assert message["content"][0] == {"text": "now the file"}
    assert message["content"][1]["toolUse"]["toolUseId"] == "g1"


def raw_start(env: dict[str, str], tmp_path: Path, *flags: str) -> str:
    """Start a session of a prompt with the raw ``temporal`` CLI and ``flags``; its id."""
    from tests.helpers.scripts import SAMPLE_TOOLS

    session = f"truth-{uuid.uuid4().hex[:8]}"
    model = approval_script(tmp_path, tmp_path / "out.txt")
    start = {"config": {"model": model, "tool_modules": [SAMPLE_TOOLS]}, "prompt": "go"}
    temporal(
        env, "workflow", "start", "--type", "AgentSession", "--task-queue",
        env["KEEL_TASK_QUEUE"], "--workflow-id", session, *flags,
        "--input", json.dumps(start),
    )  # fmt: skip
    return session


def test_a_run_timeout_reads_timed_out(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    """A session started with a run timeout (the raw CLI's ``--run-timeout``) that ran out."""
    env = server_env
    session = raw_start(env, tmp_path, "--run-timeout", "4s")
    until_status(env, session, "WORKFLOW_EXECUTION_STATUS_TIMED_OUT")
    said = "the session timed out in Temporal (its run timeout)"
    out = keel("show", session, "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "timed_out"
    assert keel("pending", session, env=env).stdout.strip().endswith(said)
    wait = keel("wait", session, env=env)
    assert wait.returncode == EXIT_ENDED and said in wait.stderr


def test_a_session_ended_before_any_worker_ran_it_reads_as_its_start(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    """Terminated before its first workflow task (here: a start delay), a session has no
    history a worker could replay, and Temporal refuses its queries; every reading command
    still answers, from the start input: its prompt's turn cancelled, nothing to decide.
    """
    env = server_env
    session = raw_start(env, tmp_path, "--start-delay", "1h")
    temporal(env, "workflow", "terminate", "--workflow-id", session, "--reason", "too late")
    said = "the session was terminated in Temporal: too late"

    shown = keel("show", session, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    as_json = json.loads(shown.stdout)
    assert as_json["status"] == "terminated" and as_json["messages"] == []
    assert [(t["turn"], t["status"], t["stop_reason"]) for t in as_json["turns"]] == [
        (1, "cancelled", "session_terminated")
    ]
    show = keel("show", session, env=env)
    assert show.returncode == 0 and "[turn 1 cancelled: 0 model calls" in show.stdout, show
    pending = keel("pending", session, env=env)
    assert pending.returncode == 0, pending.stderr
    assert pending.stdout.strip() == f"no pending interrupts in session {session}: {said}"
    wait = keel("wait", session, "--json", env=env)
    assert wait.returncode == EXIT_ENDED, wait.stderr
    assert json.loads(wait.stdout)["stop_reason"] == "session_terminated"
    watch = keel("watch", session, "--until-idle", env=env)
    assert watch.returncode == EXIT_ENDED, watch.stderr
    effects = keel("effects", session, "--json", env=env)
    assert effects.returncode == 0, effects.stderr


def test_a_failed_start_reads_failed_with_the_field(
    server_env: dict[str, str], worker_process: subprocess.Popen[str]
) -> None:
    """A raw start whose input does not validate fails; every reading command says why."""
    env = server_env
    session = f"truth-{uuid.uuid4().hex[:8]}"
    temporal(
        env, "workflow", "start", "--type", "AgentSession", "--task-queue",
        env["KEEL_TASK_QUEUE"], "--workflow-id", session,
        "--input", json.dumps({"config": {"model": 12}, "prompt": "go"}),
    )  # fmt: skip
    until_status(env, session, "WORKFLOW_EXECUTION_STATUS_FAILED")
    shown = keel("show", session, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "failed"
    pending = keel("pending", session, env=env)
    assert pending.returncode == 0, pending.stderr
    said = pending.stdout.strip()
    assert said.startswith(f"no pending interrupts in session {session}: the session failed: ")
    assert "config.model" in said or "model" in said, said
    for command in (["wait", session], ["watch", session, "--until-idle"]):
        done = keel(*command, env=env)
        assert done.returncode == EXIT_ENDED, (command, done.stderr)
        assert "keel: the session failed: AgentSession start input: config.model: " in (
            done.stderr
        ), done.stderr
    steer = keel("steer", session, "more", env=env)
    assert steer.returncode == 2 and "closed (failed)" in steer.stderr
