"""What ``keel`` prints in the corners: an empty reply, a reader that stops reading."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.helpers.cli import ROOT, keel, keel_env, keel_popen
from tests.helpers.scripts import respond, text, write_script


def test_an_empty_reply_is_said_not_left_blank(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "e.json", [respond(), respond(text(""))])
    session = f"empty-{uuid.uuid4().hex[:8]}"
    done = keel("run", "--session", session, "--model", model, "say nothing", env=server_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "(the model's reply was empty)\n"
    again = keel("run", "--session", session, "again", env=server_env)
    assert again.returncode == 0 and again.stdout == "(the model's reply was empty)\n"
    as_json = keel("show", session, "--json", env=server_env)
    assert json.loads(as_json.stdout)["turns"][0]["status"] == "completed"  # not a failure


def closed_pipe(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``keel ARGS`` with its stdout a pipe nobody reads: closed before it writes."""
    proc = keel_popen(
        *args,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=60), err


def test_output_to_a_closed_pipe_ends_quietly(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "p.json", [respond(text("one\ntwo\nthree"))])
    session = f"pipe-{uuid.uuid4().hex[:8]}"
    assert keel("run", "--session", session, "--model", model, "go", env=server_env).returncode == 0
    for args in (["sessions"], ["show", session], ["--help"], ["--version"]):
        code, err = closed_pipe(*args, env=server_env)
        assert (code, err) == (141, ""), (args, code, err)

    # as a person types it: the pipeline ends, no traceback, exit 0 or 141
    keel_cmd = f"{sys.executable} -m keel.worker.cli"
    done = subprocess.run(
        ["bash", "-c", f'{keel_cmd} show {session} | head -1; echo "${{PIPESTATUS[0]}}" >&2'],
        env=server_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "user: go\n"
    assert done.stderr.strip() in ("0", "141"), done.stderr


def test_a_command_that_starts_its_own_temporal_says_so_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal, the few seconds an embedded Temporal takes are said; in a pipe, not."""
    import os

    model = write_script(tmp_path / "m.json", [respond(text("hi"))])
    env = keel_env(KEEL_HOME=str(tmp_path / "home"))
    env.pop("TEMPORAL_ADDRESS", None)
    leader, follower = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "keel.worker.cli", "run", "--no-input", "--model", model, "hi"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            timeout=120,
        )
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0, said
    assert b"starting the embedded Temporal" in said
    piped = keel("show", "--json", "no-such-session-x", env=env, cwd=tmp_path)
    assert "starting the embedded Temporal" not in piped.stderr
