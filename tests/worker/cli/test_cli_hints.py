"""Every ``keel ...`` command Keel prints as a suggestion works as printed, in the state it
describes: a scripted session is taken through approvals, a question, a next turn, Ctrl-C and
a scheduled job, and each command suggested on the way is run as it was printed.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from keel.worker.server.dev_record import record_path
from keel.worker.server.devserver import find_temporal_cli
from keel.worker.settings import Settings
from keel.workflows.activity_options import MODEL_ACTIVITY
from tests.helpers.cli import ROOT, keel, keel_env, keel_popen
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

# a suggestion on a line of its own (indented, maybe followed by what it does), in backticks,
# or after "with: "
_INDENTED = re.compile(r"^\s+(keel [^:].*?)(?:\s{2,}\S.*)?$")
_QUOTED = re.compile(r"`(keel [^`]+)`")
_AFTER_WITH = re.compile(r"with: (keel \S.*)$")


def suggestions(*outputs: str) -> dict[str, list[str]]:
    """Each ``keel`` command suggested in the outputs, as words, by its subcommand."""
    found: dict[str, list[str]] = {}
    for output in outputs:
        for line in output.splitlines():
            lines = [m.group(1) for m in (_INDENTED.match(line), _AFTER_WITH.search(line)) if m]
            for suggested in [*lines, *_QUOTED.findall(line)]:
                words = shlex.split(suggested)
                found.setdefault(words[1], words)
    return found


def run(words: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a suggested command as printed (``PROMPT`` being a placeholder for one)."""
    assert words[0] == "keel", words
    args = ["what next?" if word == "PROMPT" else word for word in words[1:]]
    if args[0] == "watch":  # until Ctrl-C: press it once it has printed
        return watch(args, cwd, env)
    return keel(*args, env=env, cwd=cwd, timeout=120)


def watch(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = keel_popen(
        *args,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the session's first event
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, first + out, err)


def interrupted_run(
    session: str, prompt: str, cwd: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """``keel run --session SESSION PROMPT``, Ctrl-C once its turn runs (a slow model call).

    Embedded (no ``TEMPORAL_ADDRESS``): once its server is up and a moment more.
    """
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keel.worker.cli",
            "run",
            "--progress",
            "--session",
            session,
            *args,
            prompt,
        ],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    address = env.get("TEMPORAL_ADDRESS")
    record = record_path(cwd / ".keel", Settings.from_env(env).state_home)
    while address is None:  # embedded: its server's address, once it has written it
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        if record.exists():
            address = json.loads(record.read_text()).get("address")
        time.sleep(0.1)
    # Temporal's own CLI (no keel command to contend with the embedded server): wait until
    # the turn's model call runs, however slowly this machine starts the command's worker
    while not model_call_runs(address, session):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def model_call_runs(address: str, session: str) -> bool:
    """Whether the session's workflow has a model call running, as ``temporal`` describes it."""
    described = subprocess.run(
        [find_temporal_cli() or "temporal", "workflow", "describe", "--workflow-id", session,
         "--address", address, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    if described.returncode != 0:
        return False  # not started yet
    pending = json.loads(described.stdout).get("pendingActivities") or []
    return any(
        a.get("activityType", {}).get("name") == MODEL_ACTIVITY
        and a.get("state") == "PENDING_ACTIVITY_STATE_STARTED"
        for a in pending
    )


@pytest.mark.timeout(300)  # some 25 keel commands, each a process start on a loaded machine
def test_every_suggested_command_works_as_printed(tmp_path: Path) -> None:
    """A newcomer's folder: no TEMPORAL_ADDRESS, each command embeds the server in turn."""
    folder = tmp_path / "work"
    folder.mkdir()
    env = keel_env()
    model = write_script(
        tmp_path / "script.json",
        [
            respond(tool_use("e1", "echo", text="first"), stop="tool_use"),  # approval
            respond(tool_use("q1", "pick_account", query="acme"), stop="tool_use"),  # question
            respond(tool_use("e2", "echo", text="second"), stop="tool_use"),  # approval
            respond(text("all done")),
            respond(text("the next turn")),
            respond(text("slow answer"), delay_s=8),  # Ctrl-C, then keel wait
            respond(text("slower answer"), delay_s=30),  # Ctrl-C, then keel cancel
        ],
    )
    session = f"hints-{uuid.uuid4().hex[:6]}"
    first = keel(
        "run", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS,
        "--require-approval", "echo", "go", env=env, cwd=folder, timeout=120,
    )  # fmt: skip
    assert first.returncode == 3, first.stderr
    offered = suggestions(first.stdout, first.stderr)
    assert set(offered) == {"approve", "deny", "run", "watch", "show"}, offered

    # while it waits for approval: reading it, then denying
    for verb in ("show", "watch"):
        done = run(offered[verb], folder, env)
        assert done.returncode == 0, (verb, done.stderr)
    pending = keel("pending", session, env=env, cwd=folder)
    assert pending.returncode == 0, pending.stderr
    assert suggestions(pending.stdout)["deny"] == offered["deny"]
    denied = run(offered["deny"], folder, env)  # the model asks a question next
    assert denied.returncode == 3, denied.stderr
    asked = suggestions(denied.stdout, denied.stderr)
    assert set(asked) == {"respond"}, asked
    answered = run(asked["respond"], folder, env)  # then another approval
    assert answered.returncode == 3, answered.stderr
    approved = run(suggestions(answered.stdout)["approve"], folder, env)
    assert approved.returncode == 0 and approved.stdout == "all done\n", approved.stderr

    # the turn has ended: the next turn, as the first run offered it
    following = run(offered["run"], folder, env)
    assert following.returncode == 0 and following.stdout == "the next turn\n", following.stderr
    after = suggestions(following.stderr)
    assert set(after) == {"run", "watch", "show"}, after
    for verb in ("show", "watch"):
        done = run(after[verb], folder, env)
        assert done.returncode == 0, (verb, done.stderr)

    # Ctrl-C during a turn: it goes on, and keel wait picks it up
    stopped = interrupted_run(session, "take your time", folder, env)
    assert stopped.returncode == 130, stopped.stderr
    assert f"keel: interrupted; turn 3 of session {session} goes on when the next" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    resume = suggestions(stopped.stderr)
    assert set(resume) == {"wait", "cancel"}, stopped.stderr
    # keel watch only reads: here nothing runs the turn meanwhile, which it says
    stalled = keel("watch", session, "--until-idle", env=env, cwd=folder)
    assert stalled.returncode == 1, stalled.stderr
    assert f"turn 3 of session {session} is not finished" in stalled.stderr
    assert suggestions(stalled.stderr) == {"wait": resume["wait"]}
    waited = run(resume["wait"], folder, env)
    assert waited.returncode == 0 and waited.stdout == "slow answer\n", waited.stderr

    # ... or keel cancel stops it (exit 1: the turn it prints was cancelled)
    stopped = interrupted_run(session, "take longer", folder, env)
    assert stopped.returncode == 130, stopped.stderr
    cancelled = run(suggestions(stopped.stderr)["cancel"], folder, env)
    assert cancelled.returncode == 1, cancelled.stderr
    assert f"turn 4 of session {session} cancelled" in cancelled.stderr
    shown = keel("show", session, "--json", env=env, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    assert [t["status"] for t in json.loads(shown.stdout)["turns"]] == [
        "completed",
        "completed",
        "completed",
        "cancelled",
    ]


def test_a_scheduled_session_is_offered_show_not_a_next_turn(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "job.json", [respond(text("nightly report"))])
    name = f"nightly{uuid.uuid4().hex[:6]}"
    created = keel(
        "schedule", "create", name, "--every", "1h", "--model", model, "report", env=server_env
    )
    assert created.returncode == 0, created.stderr
    try:
        assert keel("schedule", "trigger", name, env=server_env).returncode == 0
        deadline = time.monotonic() + 60
        sessions: list[str] = []
        while not sessions:
            assert time.monotonic() < deadline, "the schedule started no session"
            listed = json.loads(keel("sessions", "--json", env=server_env).stdout)
            sessions = [s["session"] for s in listed if s["schedule"] == name]
            time.sleep(0.5)
        [session] = sessions
        waited = keel("wait", session, env=server_env)
        assert waited.returncode == 0 and waited.stdout == "nightly report\n", waited.stderr
        offered = suggestions(waited.stderr)
        assert set(offered) == {"show"}, waited.stderr  # a closed job takes no next turn
        assert f"session {session} is closed" in waited.stderr
        shown = run(offered["show"], ROOT, server_env)
        assert shown.returncode == 0 and "assistant: nightly report" in shown.stdout
    finally:
        keel("schedule", "delete", name, env=server_env)


def test_a_detached_turn_is_offered_wait_and_watch(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "d.json", [respond(text("later"), delay_s=1)])
    started = keel("run", "--detach", "--model", model, "in the background", env=server_env)
    assert started.returncode == 0, started.stderr
    offered = suggestions(started.stderr)
    assert set(offered) == {"wait", "watch"}, started.stderr
    watched = run(offered["watch"], ROOT, server_env)
    assert watched.returncode == 0, watched.stderr
    waited = run(offered["wait"], ROOT, server_env)
    assert waited.returncode == 0 and waited.stdout == "later\n", waited.stderr
    assert set(suggestions(waited.stderr)) == {"run", "watch", "show"}


def test_ctrl_c_with_a_server_that_outlives_the_command(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "slow.json", [respond(text("worth the wait"), delay_s=15)])
    session = f"ctrlc-{uuid.uuid4().hex[:6]}"
    stopped = interrupted_run(session, "slowly", ROOT, server_env, "--model", model)
    assert stopped.returncode == 130, stopped.stderr
    assert f"keel: interrupted; turn 1 of session {session} goes on in the background:" in (
        stopped.stderr
    )
    assert "Traceback" not in stopped.stderr
    resume = suggestions(stopped.stderr)
    assert set(resume) == {"wait", "cancel"}, stopped.stderr
    listed = json.loads(keel("sessions", "--json", env=server_env).stdout)
    assert [s["status"] for s in listed if s["session"] == session] == ["running"]
    waited = run(resume["wait"], ROOT, server_env)
    assert waited.returncode == 0 and waited.stdout == "worth the wait\n", waited.stderr
