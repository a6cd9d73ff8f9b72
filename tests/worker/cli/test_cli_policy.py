"""``keel approve --always``, ``--always-when`` and ``keel policy`` (issue 35)."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel, keel_worker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def calls(out: Path, *values: str) -> list[dict[str, object]]:
    steps = [
        respond(tool_use(f"g-{v}", "guarded_record", path=str(out), value=v), stop="tool_use")
        for v in values
    ]
    return [*steps, respond(text("done"))]


def test_approve_always_then_policy_lists_and_revokes(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.txt"
    model = write_script(tmp_path / "m.json", calls(out, "docs/a", "docs/b", "src/c"))
    session = f"pol-{uuid.uuid4().hex[:8]}"
    run = keel(
        "run", "--json", "--no-input", "--session", session, "--model", model,
        "--tools", SAMPLE_TOOLS, "go", env=server_env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    [interrupt] = json.loads(run.stdout)["interrupts"]
    bad = keel("approve", session, interrupt["id"], "--always-when", "value ~ 1", env=server_env)
    assert bad.returncode == 2 and "--always-when: not a test" in bad.stderr, bad.stderr
    approved = keel(
        "approve", "--json", "--no-input", session, interrupt["id"],
        "--always-when", 'value startswith "docs/"', env=server_env,
    )  # fmt: skip
    # docs/b ran on the standing approval; src/c asks
    assert approved.returncode == 3, approved.stderr
    [asking] = json.loads(approved.stdout)["interrupts"]
    assert asking["tool_use"]["input"]["value"] == "src/c"
    assert out.read_text().splitlines() == ["docs/a", "docs/b"]

    listed = keel("policy", session, env=server_env)
    assert listed.returncode == 0, listed.stderr
    for reading in ("pending", "show"):
        shown = keel(reading, session, env=server_env)
        assert '[approved always: guarded_record, value startswith "docs/"' in shown.stdout
    assert 'guarded_record: value startswith "docs/"' in listed.stdout
    assert f"keel policy {session} --revoke guarded_record" in listed.stdout
    as_json = json.loads(keel("policy", session, "--json", env=server_env).stdout)
    assert [a["tool"] for a in as_json["standing"]] == ["guarded_record"]

    nothing = keel("policy", session, "--revoke", "echo", env=server_env)
    assert nothing.returncode == 2 and "no standing approval" in nothing.stderr
    revoked = keel("policy", session, "--revoke", "guarded_record", env=server_env)
    assert revoked.returncode == 0, revoked.stderr
    assert "no standing approvals" in revoked.stdout
    denied = keel("deny", session, asking["id"], "--reason", "not src", env=server_env)
    assert denied.returncode == 0, denied.stderr
    assert out.read_text().splitlines() == ["docs/a", "docs/b"]


def test_a_standing_approval_survives_a_worker_killed_with_sigkill(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """Granted, then the worker dies (SIGKILL) while the turn waits on another tool; a new
    worker rebuilds the session from its history, standing approval included."""
    out, note = tmp_path / "out.txt", tmp_path / "note.txt"
    model = write_script(
        tmp_path / "m.json",
        [
            respond(tool_use("g1", "guarded_record", path=str(out), value="1"), stop="tool_use"),
            respond(tool_use("n1", "guarded_note", path=str(note), value="n"), stop="tool_use"),
            respond(tool_use("g2", "guarded_record", path=str(out), value="2"), stop="tool_use"),
            respond(text("done")),
        ],
    )
    session = f"pol-kill-{uuid.uuid4().hex[:8]}"
    with keel_worker(server_env, SAMPLE_TOOLS) as first:
        run = keel(
            "run", "--json", "--no-input", "--session", session, "--model", model,
            "--tools", SAMPLE_TOOLS, "go", env=server_env,
        )  # fmt: skip
        [asking] = json.loads(run.stdout)["interrupts"]
        always = keel("approve", "--json", "--no-input", session, asking["id"], "--always",
                      env=server_env)  # fmt: skip
        [waiting] = json.loads(always.stdout)["interrupts"]
        assert waiting["tool_use"]["name"] == "guarded_note", always.stdout
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    with keel_worker(server_env, SAMPLE_TOOLS):
        done = keel("approve", "--json", "--no-input", session, waiting["id"], env=server_env)
        assert done.returncode == 0, done.stdout + done.stderr  # g2 ran without asking
        listed = keel("policy", session, env=server_env)
    assert out.read_text().splitlines() == ["1", "2"] and note.read_text() == "n\n"
    assert "guarded_record: every call" in listed.stdout


def test_approve_always_with_max_uses_runs_out_and_policy_shows_what_is_left(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    """``keel approve --always --max-uses 3`` (issue 44): three later calls run unasked, the
    next asks; ``keel policy`` shows the uses left; bounds without --always are exit 2."""
    out, note = tmp_path / "out.txt", tmp_path / "note.txt"
    steps = calls(out, "a", "b")[:-1]
    steps.append(respond(tool_use("n", "guarded_note", path=str(note), value="n"), stop="tool_use"))
    steps += calls(out, "c", "d", "e")
    model = write_script(tmp_path / "m.json", steps)
    session = f"pol-max-{uuid.uuid4().hex[:8]}"
    run = keel(
        "run", "--json", "--no-input", "--session", session, "--model", model,
        "--tools", SAMPLE_TOOLS, "go", env=server_env,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr
    [interrupt] = json.loads(run.stdout)["interrupts"]
    for bad, said in (
        (["--max-uses", "2"], "--max-uses bound a standing approval: add --always"),
        (["--always", "--max-uses", "0"], "--max-uses 0: at least 1"),
        (["--always", "--for", "soon"], "--for 'soon': expected a duration"),
        (["--always", "--for", "0s"], "at least one second"),
        (["--always", "--total", "amount >= 100"], "FIELD <= LIMIT"),
        (["--always", "--total", 'amount <= "a"'], "FIELD <= LIMIT"),
        (["--always", "--total", "amount <= 1 and fee <= 2"], "FIELD <= LIMIT"),
        (["--always", "--for", "400d"], "for_s is"),
    ):
        refused = keel("approve", session, interrupt["id"], *bad, env=server_env)
        assert refused.returncode == 2 and said in refused.stderr, (bad, refused.stderr)
    approved = keel(
        "approve", "--json", "--no-input", session, interrupt["id"], "--always",
        "--max-uses", "3", "--for", "1h", env=server_env,
    )  # fmt: skip
    assert approved.returncode == 3, approved.stderr
    [asking] = json.loads(approved.stdout)["interrupts"]
    assert asking["tool_use"]["name"] == "guarded_note"
    listed = keel("policy", session, env=server_env)
    assert "guarded_record: every call" in listed.stdout, listed.stdout
    assert "2 of 3 uses left, expires in " in listed.stdout, listed.stdout
    pending = keel("pending", session, env=server_env)
    assert "; 2 of 3 uses left, expires in" in pending.stdout, pending.stdout
    [standing] = json.loads(keel("policy", session, "--json", env=server_env).stdout)["standing"]
    assert (standing["max_uses"], standing["uses"], standing["uses_left"]) == (3, 1, 2)
    assert 3500 < standing["expires_in_s"] <= 3600 and "total_left" not in standing

    noted = keel("approve", "--json", "--no-input", session, asking["id"], env=server_env)
    assert noted.returncode == 3, noted.stderr
    [last] = json.loads(noted.stdout)["interrupts"]
    assert last["tool_use"]["input"]["value"] == "e"  # c and d ran: the approval ran out
    assert out.read_text().splitlines() == ["a", "b", "c", "d"]
    assert "no standing approvals" in keel("policy", session, env=server_env).stdout
    denied = keel("deny", session, last["id"], "--reason", "enough", env=server_env)
    assert denied.returncode == 0, denied.stderr
