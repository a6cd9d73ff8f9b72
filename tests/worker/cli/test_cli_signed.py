"""``keel keygen`` and signed ``keel approve``: unsigned or wrongly signed exits 2."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from keel.worker.server.devserver import find_temporal_cli
from keel.worker.signing import ApproverKey
from keel.workflows.contracts import Interrupt
from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.worker.cli.test_cli import approval_script


def test_keygen_then_only_the_right_key_approves(
    server_env: dict[str, str], worker_process: subprocess.Popen[str], tmp_path: Path
) -> None:
    made = keel("keygen", "alice", env=server_env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    public = made.stdout.strip().splitlines()[-1]
    assert public.startswith("ed25519:")
    assert (tmp_path / "alice.key").stat().st_mode & 0o777 == 0o600
    again = keel("keygen", "alice", env=server_env, cwd=tmp_path)
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    other = keel("keygen", "mallory", "--out", str(tmp_path / "m.pem"), env=server_env)
    assert other.returncode == 0, other.stderr

    target = tmp_path / "out.txt"
    session = f"cli-{uuid.uuid4().hex[:8]}"
    model = approval_script(tmp_path / "s.json", target)
    bad_key = keel(
        "run",
        "--session",
        session,
        "--model",
        model,
        "--approver-key",
        "alice=ed25519:AAAA",
        "go",
        env=server_env,
    )
    assert bad_key.returncode == 2 and "--approver-key alice" in bad_key.stderr
    waiting = keel(
        "run",
        "--json",
        "--session",
        session,
        "--model",
        model,
        "--tools",
        SAMPLE_TOOLS,
        "--approver-key",
        f"alice={public}",
        "do the guarded thing",
        env=server_env,
    )
    assert waiting.returncode == 3, waiting.stderr
    [interrupt] = json.loads(waiting.stdout)["interrupts"]
    iid = interrupt["id"]

    unsigned = keel("approve", session, iid, "--approver", "alice", env=server_env)
    assert unsigned.returncode == 2 and "is not signed" in unsigned.stderr
    wrong = keel(
        "approve",
        session,
        iid,
        "--approver",
        "alice",
        "--key",
        str(tmp_path / "m.pem"),
        env=server_env,
    )
    assert wrong.returncode == 2 and "does not verify" in wrong.stderr
    assert not target.exists()
    env = {**server_env, "KEEL_APPROVER_KEY": str(tmp_path / "alice.key")}
    ok = keel("approve", session, iid, "--approver", "alice", "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert target.read_text().splitlines() == ["approved"]
    shown = keel("show", session, env=server_env)
    assert shown.returncode == 0, shown.stderr
    assert f"{iid} approved by alice, signature verified: key SHA256:" in shown.stdout
    as_json = json.loads(keel("show", session, "--json", env=server_env).stdout)
    [decision] = as_json["signed_decisions"]
    assert decision["by"] == "alice" and decision["key"].startswith("SHA256:")


def test_a_captured_signature_for_another_input_is_refused_and_the_key_approves(
    server_env: dict[str, str],
    worker_process: subprocess.Popen[str],
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
) -> None:
    """Two writes wait; a signature made for what a rogue server showed moves neither.

    Sent by the raw ``temporal`` CLI (update: refused, nothing recorded; signal: ignored),
    then ``keel approve --key`` and ``keel deny --key`` sign what this server shows.
    """
    public = keel("keygen", "alice", env=server_env, cwd=tmp_path).stdout.strip().splitlines()[-1]
    alice = ApproverKey.load(tmp_path / "alice.key")
    safe, secret = tmp_path / "docs.txt", tmp_path / "passwd"
    model = write_script(
        tmp_path / "s.json",
        [
            respond(
                tool_use("w1", "guarded_record", path=str(safe), value="ok"),
                tool_use("w2", "guarded_record", path=str(secret), value="root::0:0"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
    )
    session = f"cli-{uuid.uuid4().hex[:8]}"
    waiting = keel(
        "run", "--json", "--session", session, "--model", model, "--tools", SAMPLE_TOOLS,
        "--approver-key", f"alice={public}", "write both", env=server_env,
    )  # fmt: skip
    assert waiting.returncode == 3, waiting.stderr
    shown = {
        i["tool_use"]["toolUseId"]: Interrupt(**i, turn=1)
        for i in json.loads(waiting.stdout)["interrupts"]
    }
    assert {i.signing for i in shown.values()} == {2}  # raw clients see which message to sign
    harmless, target = shown["w1"], shown["w2"]
    as_shown_elsewhere = target.model_copy(update={"tool_use": harmless.tool_use})
    captures = [
        alice.sign(session, target.id, "decide", "approve", None, "alice"),  # the old message
        alice.sign_for(
            as_shown_elsewhere, namespace="default", session_id=session, kind="decide",
            what="approve", reason=None, approver="alice",
        ),
    ]  # fmt: skip
    temporal = [find_temporal_cli() or "temporal", "--address", server_env["TEMPORAL_ADDRESS"]]
    for signature in captures:
        body = json.dumps(
            {"interrupt_id": target.id, "decision": "approve", "approver": "alice",
             "signature": signature}
        )  # fmt: skip
        for kind in ("update", "signal"):
            args = ["update", "execute"] if kind == "update" else ["signal"]
            sent = subprocess.run(
                [*temporal[:1], "workflow", *args, "-w", session, "--name", "decide",
                 "--input", body, *temporal[1:]],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            if kind == "update":
                assert sent.returncode != 0 and "does not verify" in sent.stderr, sent.stderr
            else:
                assert sent.returncode == 0, sent.stderr
    pending = json.loads(keel("pending", session, "--json", env=server_env).stdout)
    assert {i["id"] for i in pending["interrupts"]} == {harmless.id, target.id}
    assert not secret.exists()

    key = str(tmp_path / "alice.key")
    denied = keel("deny", session, target.id, "--approver", "alice", "--key", key,
                  "--reason", "not that file", env=server_env)  # fmt: skip
    assert denied.returncode == 3, denied.stderr  # the other write still waits
    ok = keel("approve", session, harmless.id, "--approver", "alice", "--key", key, "--json",
              env=server_env)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert safe.read_text().splitlines() == ["ok"]
    assert not secret.exists()
