"""A budget on the command line: a capped ``keel run`` waits, ``keel approve --extend`` and
``keel budget`` let it go on, ``keel deny`` ends it (issue 44)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def looping(tmp_path: Path, out: Path, calls: int, tokens: int = 10) -> str:
    steps = [
        respond(
            tool_use(f"r{i}", "record", path=str(out), value=f"line {i}"),
            stop="tool_use",
            tokens=tokens,
        )
        for i in range(calls)
    ]
    name = f"loop-{uuid.uuid4().hex[:6]}.json"
    return write_script(tmp_path / name, [*steps, respond(text("all done"), tokens=tokens)])


def test_a_capped_run_waits_and_approve_extend_lets_it_finish(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    session = f"bud-{uuid.uuid4().hex[:8]}"
    run = keel(
        "run", "--json", "--no-input", "--session", session, "--model",
        looping(tmp_path, out, 4), "--tools", SAMPLE_TOOLS, "--max-cycles", "2", "go",
        env=server_env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr  # waiting for a person
    [interrupt] = json.loads(run.stdout)["interrupts"]
    assert interrupt["kind"] == "budget"
    pending = keel("pending", session, env=server_env)
    assert pending.returncode == 0, pending.stderr
    assert "budget reached: turn reached its budget of 2 model calls" in pending.stdout
    assert f"keel approve {session} {interrupt['id']}" in pending.stdout
    bad = keel("approve", session, interrupt["id"], "--extend", "0", env=server_env)
    assert bad.returncode == 2 and "extend" in bad.stderr, bad.stderr
    approved = keel(
        "approve", "--json", "--no-input", session, interrupt["id"], "--extend", "5",
        env=server_env,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["status"] == "completed"
    assert out.read_text().splitlines() == [f"line {i}" for i in range(4)]


def test_deny_ends_the_turn_and_keel_budget_raises_the_session_budget(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    session = f"bud-{uuid.uuid4().hex[:8]}"
    run = keel(
        "run", "--json", "--no-input", "--session", session, "--model",
        looping(tmp_path, out, 3), "--tools", SAMPLE_TOOLS, "--token-budget", "30", "go",
        env=server_env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    [interrupt] = json.loads(run.stdout)["interrupts"]
    raised = keel("budget", "--json", session, "--tokens", "1000", env=server_env)
    assert raised.returncode == 0, raised.stderr
    assert json.loads(raised.stdout) == {"session": session, "tokens": 1000, "cost_usd": None}
    waited = keel("wait", "--json", "--no-input", session, env=server_env)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["status"] == "completed"
    shown = keel("show", "--json", session, env=server_env)
    decided = [i for t in json.loads(shown.stdout)["turns"] for i in t.get("interrupts", [])]
    assert decided == []  # nothing waits any more
    assert interrupt["id"]
    # a second session denied at its cap ends with the cap as its stop reason
    other = f"bud-{uuid.uuid4().hex[:8]}"
    capped = keel(
        "run", "--json", "--no-input", "--session", other, "--model",
        looping(tmp_path, out, 3), "--tools", SAMPLE_TOOLS, "--max-cycles", "1", "go",
        env=server_env,
    )  # fmt: skip
    [waiting] = json.loads(capped.stdout)["interrupts"]
    denied = keel(
        "deny", "--json", "--no-input", other, waiting["id"], "--reason", "enough",
        env=server_env,
    )  # fmt: skip
    assert denied.returncode == 1, denied.stderr
    result = json.loads(denied.stdout)
    assert result["status"] == "failed" and result["stop_reason"] == "max_cycles"
    assert "enough" in result["error"]
