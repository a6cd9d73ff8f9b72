"""keel respond, keel pending and interactive answers for questions tools ask."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.worker.cli.test_cli_watch import Terminal


def question_script(tmp_path: Path) -> str:
    return write_script(
        tmp_path / f"q-{uuid.uuid4().hex[:6]}.json",
        [
            respond(tool_use("p1", "pick_account", query="rent"), stop="tool_use"),
            respond(text("paid")),
        ],
    )


def run_args(session: str, model: str) -> list[str]:
    return ["run", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS]


def test_respond_answers_and_waits_like_run(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    session = f"cq-{uuid.uuid4().hex[:8]}"
    waiting = keel(*run_args(session, question_script(tmp_path)), "--json", "pay", env=server_env)
    assert waiting.returncode == 3, waiting.stderr
    [question] = json.loads(waiting.stdout)["interrupts"]
    assert question["kind"] == "question" and question["name"] == "account"
    assert question["reason"] == "which account matches 'rent'?"
    assert question["tool_use"]["name"] == "pick_account"

    shown = keel("pending", session, env=server_env)
    assert "question from tool 'pick_account'" in shown.stdout
    assert f"keel respond {session} {question['id']}" in shown.stdout

    wrong = keel("respond", session, "no-such-id", "x", env=server_env)
    assert wrong.returncode == 2 and "unknown interrupt id 'no-such-id'" in wrong.stderr
    approve = keel("approve", session, question["id"], env=server_env)
    assert approve.returncode == 2 and "use respond" in approve.stderr

    done = keel("respond", session, question["id"], '{"iban": "X1"}', "--json", env=server_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    conv = json.loads(keel("show", session, "--json", env=server_env).stdout)["messages"]
    result = conv[2]["content"][0]["toolResult"]
    assert result["content"] == [{"text": "using {'iban': 'X1'}"}]


def test_interactive_answer_on_a_terminal(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    session = f"cq-{uuid.uuid4().hex[:8]}"
    term = Terminal([*run_args(session, question_script(tmp_path)), "pay"], server_env)
    shown = term.read_until("answer (JSON or text): ")
    assert "tool 'pick_account' asks (account): which account matches 'rent'?" in shown
    term.write("savings\n")
    assert term.finish() == 0, term.output
    assert "paid" in term.output.split("answer (JSON or text): ")[-1]
    conv = json.loads(keel("show", session, "--json", env=server_env).stdout)["messages"]
    assert conv[2]["content"][0]["toolResult"]["content"] == [{"text": "using savings"}]
