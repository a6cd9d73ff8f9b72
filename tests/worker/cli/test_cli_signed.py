"""``keel keygen`` and signed ``keel approve``: unsigned or wrongly signed exits 2."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS
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
