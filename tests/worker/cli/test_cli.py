"""The ``keel`` command line as a user runs it: separate processes, a real dev server."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def test_run_json_two_cycle_turn_with_tool_module(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            respond(tool_use("t1", "add", a=2, b=3), stop="tool_use", tokens=5),
            respond(text("2 + 3 = 5"), tokens=7),
        ],
    )
    session = f"cli-{uuid.uuid4().hex[:8]}"
    done = keel(
        "run",
        "--json",
        "--session",
        session,
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "--system",
        "you add numbers",
        "what is 2 + 3?",
        env=server_env,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {
        "session",
        "workflow_id",
        "status",
        "stop_reason",
        "interrupts",
        "message",
        "usage",
        "error",
    }
    assert out["session"] == out["workflow_id"] == session
    assert out["status"] == "completed" and out["stop_reason"] == "end_turn"
    assert out["message"] == {"role": "assistant", "content": [{"text": "2 + 3 = 5"}]}
    assert out["usage"]["totalTokens"] == 24 and out["error"] is None and out["interrupts"] == []

    shown = keel("show", session, "--json", env=server_env)
    assert shown.returncode == 0, shown.stderr
    conv = json.loads(shown.stdout)
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant", "user", "assistant"]
    assert conv["messages"][2]["content"][0]["toolResult"]["content"] == [{"json": 5}]
    assert conv["status"] == "idle" and conv["usage"]["totalTokens"] == 24
    assert conv["turns"] == [
        {
            "turn": 1,
            "status": "completed",
            "stop_reason": "end_turn",
            "cycles": 2,
            "usage": {"inputTokens": 12, "outputTokens": 12, "totalTokens": 24},
            "cost_usd": None,  # no price: unknown, never 0
            "cost_unknown": True,
            "sub_agents": {},
            "output": None,
        }
    ]
    assert conv["cost_usd"] is None and conv["cost_unknown"] is True
    human = keel("show", session, env=server_env)
    assert "[turn 1 completed: 2 model calls, 12 in / 12 out tokens]" in human.stdout

    # the worker stops cleanly on SIGTERM
    worker_process.send_signal(signal.SIGTERM)
    assert worker_process.wait(timeout=30) == 0


def test_failed_turn_exits_1_and_session_stays(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(tmp_path / "s.json", [respond(text("one answer only"))])
    session = f"cli-{uuid.uuid4().hex[:8]}"
    first = keel("run", "--session", session, "--model", model, "hello", env=server_env)
    assert first.returncode == 0 and first.stdout.strip() == "one answer only"
    second = keel("run", "--json", "--session", session, "again", env=server_env)
    assert second.returncode == 1
    out = json.loads(second.stdout)
    assert out["status"] == "failed" and "past the end" in out["error"]


def test_invalid_input_exits_2_with_reason(server_env: dict[str, str], tmp_path: Path) -> None:
    orphan = tmp_path / "orphan.json"
    orphan.write_text(
        json.dumps(
            [
                {
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "x", "content": [{"text": "?"}]}}],
                }
            ]
        )
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    cases = [
        (
            ["run", "--model", "scripted:x.json", "--messages", str(orphan), "hi"],
            "orphan toolResult 'x'",
        ),
        (["run", "--model", "scripted:x.json", "--messages", str(broken), "hi"], "not valid JSON"),
        (
            ["run", "--model", "scripted:x.json", "--messages", str(tmp_path / "none.json"), "hi"],
            "cannot read",
        ),
        (["run", "--model", "scripted:x.json", "   "], "prompt is empty"),
        (["run", "--session", f"new-{uuid.uuid4().hex[:6]}", "hi"], "no model"),
        (["show", f"nosuch-{uuid.uuid4().hex[:6]}"], "no session"),
        (["worker", "--tools", "no_such_module_xyz"], "module 'no_such_module_xyz' not found"),
        (
            ["run", "--model", "scripted:x.json", "--max-cycles", "0", "hi"],
            "--max-cycles: Input should be greater than 0",
        ),
    ]
    for args, reason in cases:
        done = keel(*args, env=server_env)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert reason in done.stderr, (args, done.stderr)


def test_unreachable_temporal_exits_1(tmp_path: Path) -> None:
    done = keel("show", "x", env=keel_env(TEMPORAL_ADDRESS="127.0.0.1:1"), timeout=60)
    assert done.returncode == 1
    assert "cannot reach Temporal at 127.0.0.1:1" in done.stderr


def test_embedded_server_and_resume_from_its_database(tmp_path: Path) -> None:
    """Without TEMPORAL_ADDRESS, keel run embeds a dev server whose SQLite file persists."""
    model = write_script(
        tmp_path / "s.json",
        [
            respond(tool_use("t", "echo", text="persisted"), stop="tool_use"),
            respond(text("first")),
            respond(text("second")),
        ],
    )
    env = keel_env()
    first = keel(
        "run",
        "--json",
        "--session",
        "embedded",
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "go",
        env=env,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert (tmp_path / ".keel" / "temporal.db").exists()
    second = keel(
        "run",
        "--json",
        "--session",
        "embedded",
        "--tools",
        SAMPLE_TOOLS,
        "again",
        env=env,
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["message"]["content"] == [{"text": "second"}]


def approval_script(path: Path, target: Path) -> str:
    return write_script(
        path,
        [
            respond(
                text("I need approval"),
                tool_use("g1", "guarded_record", path=str(target), value="approved"),
                stop="tool_use",
            ),
            respond(text("finished")),
        ],
    )


def test_approval_flow_exit_codes_and_payload(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    model = approval_script(tmp_path / "s.json", target)
    session = f"cli-{uuid.uuid4().hex[:8]}"
    waiting = keel(
        "run",
        "--json",
        "--session",
        session,
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "do the guarded thing",
        env=server_env,
    )
    assert waiting.returncode == 3, waiting.stderr
    out = json.loads(waiting.stdout)
    assert out["status"] == "interrupted"
    [interrupt] = out["interrupts"]
    assert set(interrupt) == {"id", "kind", "tool_use", "name", "reason", "signing"}
    assert interrupt["kind"] == "approval" and interrupt["name"] == "guarded_record"
    assert interrupt["tool_use"] == {
        "toolUseId": "g1",
        "name": "guarded_record",
        "input": {"path": str(target), "value": "approved"},
    }

    pending = keel("pending", session, "--json", env=server_env)
    assert pending.returncode == 0, pending.stderr
    assert [i["id"] for i in json.loads(pending.stdout)["interrupts"]] == [interrupt["id"]]
    human = keel("pending", session, env=server_env)
    assert interrupt["id"] in human.stdout and f"keel approve {session}" in human.stdout

    rejected = keel("approve", session, "not-an-id", env=server_env)
    assert rejected.returncode == 2 and "unknown interrupt id 'not-an-id'" in rejected.stderr
    idle_steer = keel("steer", session, "hello", env=server_env)
    assert idle_steer.returncode == 0, idle_steer.stderr  # the turn is still running (waiting)

    denied = keel(
        "deny", session, interrupt["id"], "--reason", "not today", "--json", env=server_env
    )
    assert denied.returncode == 0, denied.stderr
    assert json.loads(denied.stdout)["status"] == "completed"
    assert not target.exists()
    again = keel("approve", session, interrupt["id"], env=server_env)
    assert again.returncode == 2 and "no longer pending" in again.stderr
    late_steer = keel("steer", session, "too late", env=server_env)
    assert late_steer.returncode == 2 and "no turn is running" in late_steer.stderr


def test_embedded_approval_across_processes(tmp_path: Path) -> None:
    """keel run exits 3 and stops its embedded server; keel approve picks the session up."""
    target = tmp_path / "out.txt"
    model = approval_script(tmp_path / "s.json", target)
    env = keel_env()
    waiting = keel(
        "run",
        "--json",
        "--session",
        "emb",
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "go",
        env=env,
        cwd=tmp_path,
    )
    assert waiting.returncode == 3, waiting.stderr
    interrupt_id = json.loads(waiting.stdout)["interrupts"][0]["id"]
    approved = keel("approve", "emb", interrupt_id, "--json", env=env, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["message"]["content"] == [{"text": "finished"}]
    assert target.read_text() == "approved\n"


def test_turn_token_budget_flag_ends_the_turn(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    model = write_script(
        tmp_path / "loop.json",
        [
            respond(tool_use(f"e{i}", "echo", text="x"), stop="tool_use", tokens=30)
            for i in range(3)
        ],
    )
    session = f"ttb-{uuid.uuid4().hex[:8]}"
    done = keel(
        "run", "--json", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS,
        "--turn-token-budget", "50", "--on-budget", "fail", "loop", env=server_env,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["stop_reason"] == "token_budget"
    assert "60 tokens of its budget of 50" in result["error"]
