"""Every ``keel`` command, wherever it goes wrong, answers in one line and the documented code.

The situations: no Temporal reachable, a namespace it does not have, a task queue no worker
ever polled, a worker that ran and stopped, an unknown session, a closed session, malformed
arguments. Exit codes (README, CLI): 1 failed (Temporal or a worker missing), 2 invalid input
or rejected request, with the reason on stderr, and never a traceback. A command that follows
a session (run, approve, deny, respond, steer, cancel, watch) waits for a worker instead: it
says so on stderr within seconds, and Ctrl-C ends it (exit 130) without a traceback.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from keel.worker.cli.main import build_parser
from keel.worker.server.devserver import find_temporal_cli
from tests.helpers.cli import ROOT, keel, keel_env, keel_popen
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port

# Every command the sweep covers; test_the_sweep_covers_every_command keeps it complete.
COMMANDS = (
    "run",
    "worker",
    "dev",
    "approve",
    "deny",
    "respond",
    "resolve",
    "steer",
    "cancel",
    "close",
    "pending",
    "effects",
    "show",
    "watch",
    "sessions",
    "keygen",
    "codec-server",
    "wait",
    "schedule",
    "ui",
    "policy",
    "budget",
    "attach",
    "deploy",
    "replay",
    "fork",
    "export",
    "eval",
)
# How each command that names a session is called for it (S: the session, I: an interrupt id).
ON_A_SESSION = {
    "run": ["run", "--session", "S", "one more thing"],
    "approve": ["approve", "S", "I"],
    "deny": ["deny", "S", "I", "--reason", "no"],
    "respond": ["respond", "S", "I", "yes"],
    "resolve": ["resolve", "S", "I", "--result", "it went through"],
    "effects": ["effects", "S"],
    "steer": ["steer", "S", "use metric units"],
    "cancel": ["cancel", "S"],
    "close": ["close", "S"],
    "pending": ["pending", "S"],
    "show": ["show", "S"],
    "watch": ["watch", "S"],
    "wait": ["wait", "S"],
    "policy": ["policy", "S"],
    "budget": ["budget", "S", "--tokens", "1000"],
    "replay": ["replay", "S", "--model", "scripted:x.json"],
    "fork": ["fork", "S", "--at", "1"],
    "export": ["export", "S"],
    "eval": ["eval", "S", "--model", "scripted:x.json"],
}
# The commands that follow a session, and so wait for a worker rather than fail.
WAITING = ("run", "approve", "deny", "respond", "resolve", "steer", "cancel", "watch", "budget")
# The commands that read a session, and so fail (exit 1) when no worker can answer.
READING = ("pending", "show", "policy", "effects")


def on(name: str, session: str, interrupt: str = "no-such-interrupt") -> list[str]:
    return [session if a == "S" else interrupt if a == "I" else a for a in ON_A_SESSION[name]]


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed on stderr (asserting it is one, and no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("keel"), lines[0]
    return lines[0]


def keel_all(
    calls: Sequence[Sequence[str]], env: dict[str, str], timeout: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Run several keel commands at once (each its own process); results in order."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: keel(*args, env=env, timeout=timeout), calls))


class Waiting:
    """A keel process expected to wait for a worker and say so on stderr."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        self.args = list(args)
        self.proc = keel_popen(*args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def notice(self, task_queue: str, within_s: float = 30) -> float:
        """Wait for the "waiting for a worker" line; seconds it took."""
        started = time.monotonic()
        wanted = f"keel: waiting for a worker on task queue {task_queue!r}"
        while (left := started + within_s - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if line.startswith(wanted):
                return time.monotonic() - started
        self.stop()
        raise AssertionError(
            f"keel {' '.join(self.args)}: no notice in {within_s} s; exit {self.proc.returncode}"
            f"; stderr: {self.seen}"
        )

    def stop(self) -> int:
        """Ctrl-C, as a person would; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(timeout=10)
        while not self.lines.empty():
            line = self.lines.get()
            if line is not None:
                self.seen.append(line)
        return code


def wait_then_interrupt(
    calls: Sequence[Sequence[str]], env: dict[str, str], task_queue: str
) -> None:
    """Each command says it waits for a worker on ``task_queue``; Ctrl-C then ends it cleanly."""
    waiting = [Waiting(args, env) for args in calls]
    try:
        for w in waiting:
            took = w.notice(task_queue)
            assert took < 20, (w.args, took)
        for w in waiting:
            code = w.stop()
            # keel watch runs until Ctrl-C, which ends it as planned (README: exit 0)
            assert code == (0 if w.args[0] == "watch" else 130), (w.args, code, w.seen)
            assert not any("Traceback" in line for line in w.seen), (w.args, w.seen)
            notices = [line for line in w.seen if "waiting for a worker" in line]
            assert len(notices) == 1, (w.args, w.seen)  # said once, not on every poll
            assert "start one with `keel worker` (or `keel dev`)" in notices[0]
    finally:
        for w in waiting:
            if w.proc.poll() is None:
                w.proc.kill()


def session_id() -> str:
    return f"fail-{uuid.uuid4().hex[:8]}"


def approval_script(tmp_path: Path) -> str:
    return write_script(
        tmp_path / f"approve-{uuid.uuid4().hex[:6]}.json",
        [
            respond(tool_use("e1", "echo", text="hi"), stop="tool_use"),
            respond(text("echoed")),
        ],
    )


def start_waiting_for_approval(session: str, tmp_path: Path, env: dict[str, str]) -> str:
    """Run a turn that waits for approval; the interrupt id."""
    done = keel(
        "run",
        "--json",
        "--session",
        session,
        "--model",
        approval_script(tmp_path),
        "--tools",
        SAMPLE_TOOLS,
        "--require-approval",
        "echo",
        "echo hi",
        env=env,
    )
    assert done.returncode == 3, done.stderr
    interrupt: str = json.loads(done.stdout)["interrupts"][0]["id"]
    return interrupt


def test_the_sweep_covers_every_command() -> None:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) == set(COMMANDS)


# --- no Temporal at TEMPORAL_ADDRESS -------------------------------------------------------


def test_no_server_every_command_exits_1_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    env = keel_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", KEEL_HOME=str(tmp_path / "home"))
    calls = [on(name, "s1") for name in ON_A_SESSION]
    calls += [
        ["worker", "--tools", SAMPLE_TOOLS],
        ["sessions"],
        ["schedule", "list"],
        ["run", "--model", "scripted:x.json", "hi"],
    ]
    for args, done in zip(calls, keel_all(calls, env), strict=True):
        assert done.returncode == 1, (args, done.stderr)
        line = one_line(done)
        assert f"cannot reach Temporal at 127.0.0.1:{port}: Connection refused" in line, args
        assert "TEMPORAL_ADDRESS" in line


def test_dev_failures_exit_1_in_one_line(tmp_path: Path) -> None:
    env = keel_env(KEEL_HOME=str(tmp_path / "home"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = keel("dev", "--port", str(port), env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert one_line(done) == f"keel: cannot start Temporal dev server: port {port} is in use"

    missing = keel(
        "dev", "--port", str(free_port()), env={**env, "KEEL_TEMPORAL_CLI": "/no/temporal"}
    )
    assert missing.returncode == 1, missing.stderr
    assert "KEEL_TEMPORAL_CLI is set to '/no/temporal'" in one_line(missing)

    fake = tmp_path / "fake-temporal"
    fake.write_text("#!/bin/sh\necho 'starting'\necho 'boom: bad flags' >&2\nexit 3\n")
    fake.chmod(0o755)
    broken = keel("dev", "--port", str(free_port()), env={**env, "KEEL_TEMPORAL_CLI": str(fake)})
    assert broken.returncode == 1, broken.stderr
    line = one_line(broken)
    assert "exited with code 3 during startup (boom: bad flags)" in line
    assert line.endswith("(more with `keel -v`)")


def test_unknown_namespace_exits_2_in_one_line(server_env: dict[str, str]) -> None:
    env = {**server_env, "TEMPORAL_NAMESPACE": "no-such-namespace"}
    calls = [on(name, "s1") for name in ON_A_SESSION]
    calls += [["worker"], ["sessions"], ["run", "--model", "scripted:x.json", "hi"]]
    address = server_env["TEMPORAL_ADDRESS"]
    for args, done in zip(calls, keel_all(calls, env), strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert one_line(done) == (
            f"keel: TEMPORAL_NAMESPACE: Temporal at {address} has no namespace 'no-such-namespace'"
        ), args


def test_the_embedded_server_serves_the_namespace_asked_for(tmp_path: Path) -> None:
    env = keel_env(KEEL_HOME=str(tmp_path / "home"), TEMPORAL_NAMESPACE="keel-elsewhere")
    model = write_script(tmp_path / "ns.json", [respond(text("in my namespace"))])
    done = keel("run", "--json", "--model", model, "hi", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["message"]["content"] == [{"text": "in my namespace"}]


# --- a task queue that no worker ever polled -----------------------------------------------


def test_no_worker_ever(server_env: dict[str, str], tmp_path: Path) -> None:
    task_queue = server_env["KEEL_TASK_QUEUE"]
    session = session_id()
    # a new session: the prompt waits for a worker to take the session's first task
    wait_then_interrupt(
        [["run", "--session", session, "--model", approval_script(tmp_path), "go"]],
        server_env,
        task_queue,
    )
    # the session exists now; reading it needs a worker: exit 1 at once, naming the queue,
    # each command well within a query's 10 s timeout (none is waited for)
    for name in READING:
        started = time.monotonic()
        done = keel(*on(name, session), env=server_env, timeout=60)
        took = time.monotonic() - started
        assert done.returncode == 1, (name, done.stderr)
        assert one_line(done) == (
            f"keel: no worker is polling task queue {task_queue!r}, so session {session!r} "
            "cannot answer; start one with `keel worker` (or `keel dev`)"
        )
        assert took < 10, (name, took)
    wait_then_interrupt([on(n, session) for n in WAITING], server_env, task_queue)
    listed = keel("sessions", "--json", env=server_env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr


# --- a worker that ran, then stopped -------------------------------------------------------


def test_worker_gone(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    task_queue = server_env["KEEL_TASK_QUEUE"]
    session = session_id()
    interrupt = start_waiting_for_approval(session, tmp_path, server_env)
    worker_process.send_signal(signal.SIGTERM)
    assert worker_process.wait(timeout=30) == 0

    for name, done in zip(
        READING, keel_all([on(n, session) for n in READING], server_env), strict=True
    ):
        assert done.returncode == 1, (name, done.stderr)
        line = one_line(done)
        assert re.match(
            rf"keel: no worker (on|is polling) task queue {task_queue!r}.*, so session "
            rf"{session!r} cannot answer.*; start one with `keel worker` \(or `keel dev`\)$",
            line,
        ), line
    wait_then_interrupt([on(n, session, interrupt) for n in WAITING], server_env, task_queue)
    listed = keel("sessions", "--json", env=server_env)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["session"] == session]
    assert row["workflow_status"] == "running" and row["status"] is None  # did not answer: "?"


def test_a_worker_that_comes_later_is_waited_for(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """Waiting is worth it: a worker started after the notice serves the turn."""
    task_queue = server_env["KEEL_TASK_QUEUE"]
    model = write_script(tmp_path / "later.json", [respond(text("served late"))])
    waiting = Waiting(["run", "--json", "--model", model, "hello"], server_env)
    waiting.notice(task_queue)
    worker = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "worker"],
        env=server_env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert waiting.proc.stdout is not None
        out = waiting.proc.stdout.read()
        assert waiting.stop() == 0, waiting.seen
        assert json.loads(out)["message"]["content"] == [{"text": "served late"}]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


# --- an unknown session --------------------------------------------------------------------


def test_unknown_session_exits_2_in_one_line(server_env: dict[str, str]) -> None:
    names = [n for n in ON_A_SESSION if n != "run"]  # run --session NEW starts the session
    calls = [on(n, "no-such-session") for n in names]
    for args, done in zip(calls, keel_all(calls, server_env), strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert one_line(done) == "keel: no session 'no-such-session'", args


# --- a closed session ----------------------------------------------------------------------


@pytest.fixture
def closed_session(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> Iterator[str]:
    session = session_id()
    model = write_script(tmp_path / "once.json", [respond(text("hello"))])
    done = keel("run", "--json", "--session", session, "--model", model, "hi", env=server_env)
    assert done.returncode == 0, done.stderr
    cli = find_temporal_cli()
    assert cli is not None
    address = server_env["TEMPORAL_ADDRESS"]
    subprocess.run(
        [
            cli,
            "workflow",
            "signal",
            "--address",
            address,
            "-w",
            session,
            "--name",
            "close",
            "--input",
            json.dumps({"reason": "done"}),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [cli, "workflow", "result", "--address", address, "-w", session],
        check=True,
        capture_output=True,
        timeout=60,
    )
    yield session


def test_closed_session_refuses_changes_and_can_still_be_read(
    server_env: dict[str, str], closed_session: str
) -> None:
    session = closed_session
    changes = ["run", "approve", "deny", "respond", "steer", "cancel"]
    calls = [on(n, session) for n in changes]
    for args, done in zip(calls, keel_all(calls, server_env), strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert one_line(done) == (
            f"keel: session {session!r} is closed (completed): it takes no more prompts, "
            "decisions or guidance; start a new session to go on"
        ), args
    reads = [on(n, session) for n in ("show", "pending", "watch")]
    for args, done in zip(reads, keel_all(reads, server_env), strict=True):
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    shown = keel("show", session, env=server_env)
    assert "assistant: hello" in shown.stdout


# --- malformed arguments -------------------------------------------------------------------

MALFORMED: list[tuple[list[str], str]] = [
    ([], "keel: the following arguments are required: command"),
    (["run"], "keel run: the following arguments are required: prompt"),
    (["run", "--max-cycles", "x", "hi"], "keel run: argument --max-cycles: invalid int value"),
    (["run", "--bogus", "hi"], "unrecognized arguments: --bogus"),
    (["run", " "], "keel: the prompt is empty"),
    (
        ["run", "--model", "scripted:x.json", "--max-cycles", "0", "hi"],
        "keel: invalid session settings: --max-cycles: Input should be greater than 0",
    ),
    (
        ["run", "--model", "scripted:x.json", "--approval-timeout", "-1", "hi"],
        "keel: invalid session settings: --approval-timeout: Input should be greater than 0",
    ),
    (
        ["run", "--messages", "/no/such/file.json", "hi"],
        "keel: --messages /no/such/file.json: cannot read /no/such/file.json: No such file",
    ),
    (["run", "--messages", "BAD_JSON", "hi"], "not valid JSON"),
    (["run", "--messages", "NOT_MESSAGES", "hi"], "not a list of Converse messages: 0.role:"),
    (["run", "--model", "gpt5:turbo", "hi"], "keel: --model: unknown model spec 'gpt5:turbo'"),
    (["worker", "--max-concurrent-activities", "many"], "keel: --max-concurrent-activities"),
    (["worker", "--bogus"], "unrecognized arguments: --bogus"),
    (["dev", "--port", "x"], "keel dev: argument --port: 'x' is not a port (a number from 1"),
    (["approve", "s1"], "keel approve: the following arguments are required: id"),
    (["deny"], "keel deny: the following arguments are required: session, id"),
    (["respond", "s1", "i1"], "keel respond: the following arguments are required: value"),
    (
        ["resolve", "s1", "i1"],
        "keel resolve: one of the arguments --result --result-file is required",
    ),
    (["effects"], "keel effects: the following arguments are required: session"),
    (["steer", "s1"], "keel steer: the following arguments are required: text"),
    (["steer", "s1", " "], "keel: the steering text is empty"),
    (["cancel"], "keel cancel: the following arguments are required: session"),
    (["pending"], "keel pending: the following arguments are required: session"),
    (["show"], "keel show: the following arguments are required: session"),
    (["watch", "s1", "--since", "x"], "keel watch: argument --since: invalid int value"),
    (["sessions", "--limit", "0"], "keel: --limit must be at least 1"),
    (["sessions", "--limit", "x"], "keel sessions: argument --limit: invalid int value"),
    (["keygen"], "keel keygen: the following arguments are required: name"),
    (["codec-server"], "keel codec-server: the following arguments are required: --port"),
    (["wait"], "keel wait: the following arguments are required: session"),
    (["wait", "s1", "--timeout", "x"], "keel wait: argument --timeout: invalid float value"),
    (["schedule"], "keel schedule: the following arguments are required: command"),
    (
        ["schedule", "create", "nightly", "hi"],
        "keel schedule create: one of the arguments --cron --every is required",
    ),
    (["ui", "--port", "x"], "keel ui: argument --port: invalid int value: 'x'"),
    (["codec-server", "--port", "1"], "keel codec-server needs KEEL_ENCRYPTION_KEY"),
    (
        ["approve", "s1", "i1", "--key", "/no/such.key"],
        "keel: cannot read approver key /no/such.key: No such file",
    ),
    (
        ["run", "--model", "scripted:x.json", "--approver-key", "alice", "hi"],
        "keel: --approver-key 'alice': expected NAME=PUBLIC_KEY",
    ),
    (["policy"], "keel policy: the following arguments are required: session"),
    (["budget", "s1"], "keel: give --tokens N, --cost DOLLARS or both"),
    (["close"], "keel close: the following arguments are required: session"),
    (["close", "s1", "--timeout", "0"], "keel: --timeout must be more than 0 seconds"),
    (["attach", "s1"], "keel attach: the following arguments are required: --tools"),
    (["deploy"], "keel deploy: the following arguments are required: deploy_command"),
    (["replay", "s1"], "keel: give the model to replay with: --model SPEC"),
    (["fork", "s1"], "keel fork: the following arguments are required: --at"),
    (["fork", "s1", "--at", "x"], "keel fork: argument --at: invalid int value: 'x'"),
    (["export"], "keel export: the following arguments are required: session"),
    (["eval", "x.json", "--model", "nope:x"], "keel: --model: "),
    (["eval", "missing.json", "--model", "scripted:x.json"], "keel: missing.json: no such case"),
]


def test_malformed_arguments_exit_2_in_one_line(server_env: dict[str, str], tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    not_messages = tmp_path / "not-messages.json"
    not_messages.write_text(json.dumps([{"text": "a message needs a role"}]))
    files = {"BAD_JSON": str(bad_json), "NOT_MESSAGES": str(not_messages)}
    calls = [[files.get(a, a) for a in args] for args, _ in MALFORMED]
    assert {args[0] for args, _ in MALFORMED if args} == set(COMMANDS)
    for (args, expected), done in zip(MALFORMED, keel_all(calls, server_env), strict=True):
        assert done.returncode == 2, (args, done.stderr)
        line = one_line(done)
        assert expected in line, (args, line)
