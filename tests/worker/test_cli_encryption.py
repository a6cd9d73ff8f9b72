"""KEEL_ENCRYPTION_KEY through the CLI.

A canary is in ``keel show``, and nowhere in Temporal's history or the store's files.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.helpers.cli import ROOT, keel
from tests.helpers.encryption import history_payload_data, new_key, store_bytes
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

CANARY = "CANARY-7f3a9c"


@contextmanager
def worker(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "worker", "--tools", SAMPLE_TOOLS],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


async def test_a_canary_is_only_readable_with_the_key(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    key = new_key()
    store = tmp_path / "store"
    out = tmp_path / "tool-out.txt"
    env = {**server_env, "KEEL_ENCRYPTION_KEY": key, "KEEL_STORE": str(store)}
    model = write_script(
        tmp_path / "s.json",
        [
            # the tool input and the tool result ("recorded <value>") carry the canary
            respond(tool_use("t1", "record", path=str(out), value=f"in-{CANARY}"), stop="tool_use"),
            respond(text(f"answer {CANARY}")),
        ],
    )
    session = f"enc-{uuid.uuid4().hex[:8]}"
    with worker(env):
        done = keel(
            "run",
            "--session",
            session,
            "--model",
            model,
            "--tools",
            SAMPLE_TOOLS,
            f"prompt {CANARY}",
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert f"answer {CANARY}" in done.stdout
        shown = keel("show", session, env=env)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count(CANARY) >= 4, shown.stdout  # prompt, input, result, answer
        blind = keel("show", session, env=server_env | {"KEEL_STORE": str(store)})
        assert blind.returncode == 1
        assert "encrypted with key" in blind.stderr, blind.stderr
        assert CANARY not in blind.stdout + blind.stderr
        other = keel("show", session, env=env | {"KEEL_ENCRYPTION_KEY": new_key()})
        assert other.returncode == 1 and "key" in other.stderr, other.stderr
        bad = keel("show", session, env=env | {"KEEL_ENCRYPTION_KEY": "c2hvcnQ="})
        assert bad.returncode == 2 and "KEEL_ENCRYPTION_KEY" in bad.stderr, bad.stderr
    history = await temporal_env.client.get_workflow_handle(session).fetch_history()
    raw = history_payload_data(history)
    assert b"encryption-key-id" in history.to_json().encode()
    assert CANARY.encode() not in raw
    files = store_bytes(store)
    assert files and CANARY.encode() not in files

