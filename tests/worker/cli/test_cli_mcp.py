"""``--mcp`` on keel run, keel worker and keel dev: MCP servers' tools from the command line."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.scripts import respond, text, tool_use, write_script

TIME = "time=mcp-server-time --local-timezone UTC"


@pytest.fixture(autouse=True)
def _time_server_installed() -> None:
    if shutil.which("mcp-server-time") is None:
        pytest.skip("mcp-server-time is not installed (pip install -e '.[dev]')")


def _time_result(log: Path) -> dict[str, object]:
    """The toolResult the model was sent in its second call (KEEL_SCRIPTED_LOG)."""
    second = [json.loads(line) for line in log.read_text().splitlines()][1]
    blocks = [b for m in second["messages"] for b in m["content"] if "toolResult" in b]
    [block] = blocks
    result: dict[str, object] = block["toolResult"]
    return result


def _ran_on_the_server(result: dict[str, object]) -> bool:
    content = json.dumps(result["content"])
    return result["status"] == "success" and "Europe/Paris" in content


def _script(tmp_path: Path) -> str:
    asked = tool_use("t1", "get_current_time", timezone="Europe/Paris")
    return write_script(
        tmp_path / "time.json",
        [
            respond(text("asking the clock"), asked, stop="tool_use"),
            respond(text("it is late")),
            respond(text("still late")),
        ],
    )


def test_embedded_run_offers_an_mcp_servers_tools(tmp_path: Path) -> None:
    log = tmp_path / "model.jsonl"
    env = keel_env(KEEL_HOME=str(tmp_path / "home"), KEEL_SCRIPTED_LOG=str(log))
    done = keel(
        "run", "--session", "clock", "--model", _script(tmp_path),
        "--mcp", TIME, "--tools", "mcp:time", "what time is it in Paris?",
        env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "it is late\n", done.stderr
    assert _ran_on_the_server(_time_result(log)), _time_result(log)
    # reading needs no worker: no tool imported, no MCP server started
    shown = keel("show", "clock", "--json", env=env, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["messages"][-1]["content"] == [{"text": "it is late"}]
    # the next turn, as keel run offered it: with the MCP server its own worker needs
    lines = done.stderr.splitlines()
    [offered] = [line.split("  ")[1] for line in lines if line.startswith("  keel run ")]
    assert offered == f"keel run --session clock --mcp '{TIME}' PROMPT", done.stderr
    words = ["later?" if w == "PROMPT" else w for w in shlex.split(offered)[1:]]
    again = keel(*words, env=env, cwd=tmp_path, timeout=120)
    assert again.returncode == 0 and again.stdout == "still late\n", again.stderr
    # a command that runs turns without it says what it lacks
    waited = keel("wait", "clock", env=env, cwd=tmp_path, timeout=120)
    assert waited.returncode == 2 and "give it --mcp NAME=COMMAND|URL" in waited.stderr
    assert "Traceback" not in waited.stderr


def test_a_server_that_does_not_start_stops_the_worker_at_start(
    server_env: dict[str, str],
) -> None:
    done = keel("worker", "--mcp", "broken=/nonexistent/mcp-server", env=server_env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken" in lines[0], done.stderr


def test_a_malformed_flag_is_refused(server_env: dict[str, str]) -> None:
    for value in ("noequals", "=mcp-server-time", "x=ftp://host/mcp"):
        done = keel("worker", "--mcp", value, env=server_env, timeout=60)
        assert done.returncode == 2, (value, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (value, done.stderr)


def test_run_against_a_server_of_its_own_refuses_mcp(server_env: dict[str, str]) -> None:
    done = keel("run", "--mcp", TIME, "--model", "scripted:x.json", "hi", env=server_env)
    assert done.returncode == 2
    assert "give --mcp to keel worker or keel dev" in done.stderr


def test_a_worker_with_mcp_serves_sessions(server_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "model.jsonl"
    worker = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "worker", "--mcp", TIME],
        env={**server_env, "KEEL_SCRIPTED_LOG": str(log)},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
        done = keel(
            "run", "--json", "--model", _script(tmp_path), "--tools", "mcp:time", "time?",
            env=server_env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["status"] == "completed" and out["message"]["content"][0]["text"] == "it is late"
        assert _ran_on_the_server(_time_result(log)), _time_result(log)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
