"""``keel watch``, ``keel sessions``, ``keel run`` progress and interactive approval.

Driven as a user does: ``keel`` processes against the session's dev server, a worker process,
and for interactive approval a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.helpers.cli import ROOT, keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

TWO_CYCLE_TYPES = [
    "prompt_queued",
    "turn_started",
    "message_added",
    "model_called",
    "tool_started",
    "tool_finished",
    "message_added",
    "message_added",
    "model_called",
    "message_added",
    "turn_ended",
]


def session_id() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def add_script(tmp_path: Path, delay_s: float = 0) -> str:
    return write_script(
        tmp_path / f"add-{uuid.uuid4().hex[:6]}.json",
        [
            respond(tool_use("t1", "add", a=2, b=3), stop="tool_use", tokens=5, delay_s=delay_s),
            respond(text("2 + 3 = 5"), tokens=7),
        ],
    )


def approval_script(tmp_path: Path, target: Path) -> str:
    return write_script(
        tmp_path / f"approval-{uuid.uuid4().hex[:6]}.json",
        [
            respond(
                text("I need approval"),
                tool_use("g1", "guarded_record", path=str(target), value="approved"),
                stop="tool_use",
            ),
            respond(text("finished")),
        ],
    )


def run_args(session: str, model: str, *extra: str) -> list[str]:
    return ["run", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS, *extra]


def test_watch_json_until_idle_sees_a_live_turn_in_order(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    session = session_id()
    run = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", *run_args(session, add_script(tmp_path, 1.5))]
        + ["--json", "add 2 and 3"],
        env=server_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the session exists once `keel run` has started it
            watch = keel("watch", session, "--until-idle", "--json", env=server_env)
            if watch.returncode != 2 or time.monotonic() > deadline:
                break
            assert "no session" in watch.stderr, watch.stderr
            time.sleep(0.2)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert watch.returncode == 0, watch.stderr
    events = [json.loads(line) for line in watch.stdout.splitlines()]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, seqs
    assert [e["type"] for e in events] == TWO_CYCLE_TYPES
    assert events[3]["detail"]["stop_reason"] == "tool_use"
    assert events[5]["detail"] == {"tool": "add", "id": "t1", "status": "success"}
    assert events[-1]["detail"]["status"] == "completed"

    # --since skips what was seen; the human form names the details
    later = keel("watch", session, "--until-idle", "--since", "8", env=server_env)
    assert later.returncode == 0, later.stderr
    lines = later.stdout.splitlines()
    assert len(lines) == 3, lines
    assert "model_called" in lines[0] and "end_turn, 7 in / 7 out tokens" in lines[0]
    assert "turn_ended" in lines[2] and "completed (end_turn)" in lines[2]


def test_watch_unknown_session_exits_2(server_env: dict[str, str]) -> None:
    done = keel("watch", f"nosuch-{uuid.uuid4().hex[:6]}", "--json", env=server_env)
    assert done.returncode == 2
    assert "no session" in done.stderr and done.stdout == ""


def sessions_entry(server_env: dict[str, str], session: str, **expect: Any) -> dict[str, Any]:
    """Poll ``keel sessions --json`` (visibility is eventually consistent) for one session."""
    deadline = time.monotonic() + 20
    while True:
        listed = keel("sessions", "--json", env=server_env)
        assert listed.returncode == 0, listed.stderr
        entries = {e["session"]: e for e in json.loads(listed.stdout)}
        entry = entries.get(session)
        if entry is not None and all(entry[k] == v for k, v in expect.items()):
            return entry
        assert time.monotonic() < deadline, (session, expect, entries)
        time.sleep(0.3)


def test_sessions_lists_pending_approvals(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    session = session_id()
    waiting = keel(
        *run_args(session, approval_script(tmp_path, target)), "--json", "go", env=server_env
    )
    assert waiting.returncode == 3, waiting.stderr
    interrupt_id = json.loads(waiting.stdout)["interrupts"][0]["id"]

    entry = sessions_entry(server_env, session, pending_approvals=1)
    assert set(entry) == {
        "session",
        "workflow_status",
        "status",
        "pending_approvals",
        "cost_usd",
        "cost_unknown",
        "last_activity",
        "started_at",
        "schedule",
    }
    assert entry["schedule"] is None  # not started by a schedule
    assert entry["cost_usd"] is None and entry["cost_unknown"] is True  # no price: unknown
    assert entry["workflow_status"] == "running" and entry["status"] == "running"
    assert entry["started_at"] <= entry["last_activity"]
    human = keel("sessions", env=server_env)
    assert human.returncode == 0 and session in human.stdout and "PENDING" in human.stdout

    approved = keel("approve", session, interrupt_id, "--json", env=server_env)
    assert approved.returncode == 0, approved.stderr
    assert target.read_text() == "approved\n"
    entry = sessions_entry(server_env, session, pending_approvals=0)
    assert entry["status"] == "idle"

    bad = keel("sessions", "--limit", "0", env=server_env)
    assert bad.returncode == 2 and "--limit" in bad.stderr


def test_run_progress_on_stderr_answer_on_stdout(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    done = keel(*run_args(session_id(), add_script(tmp_path)), "--progress", "add", env=server_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2 + 3 = 5\n"
    progress, _, where = done.stderr.partition("\nsession ")
    expected = [
        "model call 1 -> tool_use (5 in / 5 out tokens)",
        "tool add started",
        "tool add finished: success",
        "model call 2 -> end_turn (7 in / 7 out tokens)",
        "turn 1 completed (end_turn)",
    ]
    assert progress.splitlines() == expected, progress
    assert "; go on with:" in where  # then which session it was, and how to go on

    # --json alone: exactly one JSON line on stdout and nothing on stderr (not a terminal)
    quiet = keel(*run_args(session_id(), add_script(tmp_path)), "--json", "add", env=server_env)
    assert quiet.returncode == 0, quiet.stderr
    assert len(quiet.stdout.splitlines()) == 1 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["status"] == "completed"
    # --json with --progress: stdout stays one JSON line, progress goes to stderr
    both = keel(
        *run_args(session_id(), add_script(tmp_path)), "--json", "--progress", "x", env=server_env
    )
    assert both.returncode == 0, both.stderr
    assert len(both.stdout.splitlines()) == 1 and json.loads(both.stdout)["status"] == "completed"
    assert "tool add finished: success" in both.stderr


class Terminal:
    """A ``keel`` process whose stdin and stdout are a pseudo-terminal; stderr is a pipe."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", *args],
            env=env,
            cwd=ROOT,
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
        os.close(slave)
        self.output = ""

    def read_until(self, marker: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} in {self.output!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready and not self._read():
                break
        assert marker in self.output, self.output
        return self.output

    def write(self, data: str) -> None:
        os.write(self.master, data.encode())

    def finish(self, timeout: float = 90) -> int:
        # drain the terminal while the process runs: a full one would block its writes
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read_ready(0.1)
        if self.proc.poll() is None:  # say what it showed, not only that it hung
            self.proc.kill()
            raise AssertionError(f"still running after {timeout:g} s; it showed:\n{self.output}")
        code = self.proc.wait()
        while self._read_ready(0):
            pass
        os.close(self.master)
        return code

    def _read_ready(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        return bool(ready) and self._read()

    def _read(self) -> bool:
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: the process closed the terminal
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)


def test_interactive_approval_on_a_terminal(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    approved_target = tmp_path / "approved.txt"
    term = Terminal(
        [*run_args(session_id(), approval_script(tmp_path, approved_target)), "go"], server_env
    )
    shown = term.read_until("approve? [y/N] ")
    assert "tool:  guarded_record (toolUseId g1)" in shown and '"value": "approved"' in shown
    term.write("y\n")
    assert term.finish() == 0, term.output
    assert "finished" in term.output.split("approve? [y/N] ")[-1]
    assert approved_target.read_text() == "approved\n"

    denied_target = tmp_path / "denied.txt"
    session = session_id()
    term = Terminal(
        [*run_args(session, approval_script(tmp_path, denied_target)), "go"], server_env
    )
    term.read_until("approve? [y/N] ")
    term.write("n\n")
    term.read_until("reason (optional): ")
    term.write("not on a friday\n")
    assert term.finish() == 0, term.output
    assert not denied_target.exists()
    shown = keel("show", session, "--json", env=server_env)
    result = json.loads(shown.stdout)["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "error" and "not on a friday" in json.dumps(result)


def test_interactive_end_of_input_leaves_the_interrupt_pending(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    session = session_id()
    target = tmp_path / "out.txt"
    term = Terminal([*run_args(session, approval_script(tmp_path, target)), "go"], server_env)
    term.read_until("approve? [y/N] ")
    term.write("\x04")  # Ctrl-D: end of input
    assert term.finish() == 3, term.output
    assert f"keel approve {session}" in term.output
    pending = keel("pending", session, "--json", env=server_env)
    assert len(json.loads(pending.stdout)["interrupts"]) == 1

    # so does Ctrl-C
    term = Terminal([*run_args(session_id(), approval_script(tmp_path, target)), "go"], server_env)
    term.read_until("approve? [y/N] ")
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 3, term.output
    assert "waiting for approval" in term.output.split("approve? [y/N] ")[-1]

    # --no-input never asks, even on a terminal
    term = Terminal(
        [*run_args(session_id(), approval_script(tmp_path, target)), "--no-input", "go"],
        server_env,
    )
    assert term.finish() == 3, term.output
    assert "approve?" not in term.output and "waiting for approval" in term.output
