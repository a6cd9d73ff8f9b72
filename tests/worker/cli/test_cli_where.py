"""``keel run`` tells a person which session it used and how to go on with it (not in --json)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def where_lines(stderr: str) -> dict[str, str]:
    """The session named on stderr, and each command offered: {"session": id, "run": line...}."""
    found = re.search(r"^session (\S+); go on with:$", stderr, re.M)
    assert found, stderr
    session = found.group(1)
    lines = {"session": session}
    for line in stderr.splitlines():
        for command in ("run", "watch", "show"):
            if line.strip().startswith(f"keel {command} "):
                lines[command] = line.strip()
    return lines


def test_run_names_its_new_session_and_the_commands_to_go_on(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "s.json", [respond(text("first")), respond(text("second"))])
    done = keel("run", "--model", model, "hello", env=server_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "first\n"  # the answer alone on stdout
    where = where_lines(done.stderr)
    session = where["session"]
    assert session.startswith("session-")
    assert where["run"].startswith(f"keel run --session {session} PROMPT")
    assert where["watch"].startswith(f"keel watch {session}")
    assert where["show"].startswith(f"keel show {session}")

    # the commands offered work as printed
    again = keel("run", "--session", session, "again", env=server_env)
    assert again.returncode == 0 and again.stdout == "second\n", again.stderr
    assert where_lines(again.stderr)["session"] == session
    shown = keel(*where["show"].split()[1:3], env=server_env)
    assert shown.returncode == 0 and "assistant: second" in shown.stdout


def test_run_says_where_also_when_it_waits_for_approval(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(
        tmp_path / "a.json",
        [respond(tool_use("e", "echo", text="x"), stop="tool_use"), respond(text("done"))],
    )
    session = f"where-{uuid.uuid4().hex[:8]}"
    done = keel(
        "run",
        "--session",
        session,
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "--require-approval",
        "echo",
        "go",
        env=server_env,
    )
    assert done.returncode == 3, done.stderr
    assert f"keel approve {session} " in done.stdout
    assert where_lines(done.stderr)["session"] == session


def test_run_json_prints_one_object_and_no_directions(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "j.json", [respond(text("as json"))])
    done = keel("run", "--json", "--model", model, "hello", env=server_env)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    result = json.loads(line)
    assert result["message"]["content"] == [{"text": "as json"}]
    assert "go on with" not in done.stderr and done.stderr == ""
