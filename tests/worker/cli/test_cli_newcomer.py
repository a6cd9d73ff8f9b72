"""The mistakes a newcomer makes get a clear message and exit 2, before anything runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from keel.worker.server.dev_record import record_path
from keel.worker.settings import Settings
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port


def test_unknown_model_spec(server_env: dict[str, str]) -> None:
    done = keel("run", "--model", "gpt5:turbo", "hello", env=server_env)
    assert done.returncode == 2
    said = "unknown model spec 'gpt5:turbo'; expected one of bedrock:<model-id>, openai:<model>"
    assert said in done.stderr


def test_missing_scripted_file_and_aws_credentials_in_embedded_mode(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    env = keel_env(
        KEEL_HOME=str(tmp_path / "home"),
        AWS_CONFIG_FILE=str(empty),
        AWS_SHARED_CREDENTIALS_FILE=str(empty),
        AWS_EC2_METADATA_DISABLED="true",
    )
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(key, None)
    missing = keel("run", "--model", "scripted:nowhere.json", "hi", env=env, cwd=tmp_path)
    assert missing.returncode == 2 and "scripted model file 'nowhere.json' not found" in (
        missing.stderr
    )
    no_creds = keel("run", "--model", "bedrock:anthropic.claude-x", "hi", env=env, cwd=tmp_path)
    assert no_creds.returncode == 2
    assert "no AWS credentials found for bedrock:" in no_creds.stderr


def test_keel_dev_serves_other_terminals_and_stops_cleanly(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    home = tmp_path / "home"
    env = keel_env(KEEL_HOME=str(home))
    dev = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "dev", "--port", str(port)]
        + ["--ui-port", str(ui_port), "--tools", SAMPLE_TOOLS],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        record = record_path(home, Settings.from_env(env).state_home)
        while not record.exists() or '"shared": true' not in record.read_text():
            assert dev.poll() is None, dev.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1.0)
        model = write_script(
            tmp_path / "s.json",
            [respond(tool_use("t", "echo", text="from dev"), stop="tool_use"), respond(text("ok"))],
        )
        other = keel_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", KEEL_HOME=str(home))
        done = keel("run", "--json", "--model", model, "--tools", SAMPLE_TOOLS, "go", env=other)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["message"]["content"] == [{"text": "ok"}]
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=30) as page:
            assert page.status == 200 and "<h1>Sessions</h1>" in page.read().decode()
    finally:
        dev.send_signal(signal.SIGINT)
        out, err = dev.communicate(timeout=60)
    assert dev.returncode == 0, err
    assert f"127.0.0.1:{port}" in out
    assert f"Keel's approvals page at http://127.0.0.1:{ui_port}" in out
    assert not record.exists()  # the server was stopped, its lock removed
