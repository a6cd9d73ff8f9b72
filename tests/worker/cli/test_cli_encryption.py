"""KEEL_ENCRYPTION_KEY through the CLI, and ``keel codec-server`` with the ``temporal`` CLI.

A canary is in ``keel show``, and nowhere in Temporal's history or the store's files.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from keel.worker.server.devserver import find_temporal_cli
from tests.helpers.cli import ROOT, keel, keel_popen, keel_worker
from tests.helpers.encryption import history_payload_data, json_payload_data, new_key, store_bytes
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port

CANARY = "CANARY-7f3a9c"


@contextmanager
def codec_server(env: dict[str, str], port: int) -> Iterator[subprocess.Popen[str]]:
    proc = keel_popen(
        "codec-server",
        "--port",
        str(port),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "codec server did not start"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
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
    with keel_worker(env, SAMPLE_TOOLS):
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

    # keel codec-server: the temporal CLI shows the history in the clear with the token only
    port = free_port()
    address = server_env["TEMPORAL_ADDRESS"]
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}  # where its URL's secret is kept
    codec_env = env | state | {"KEEL_CODEC_TOKEN": "s3cret"}
    no_key = {k: v for k, v in env.items() if k != "KEEL_ENCRYPTION_KEY"} | state
    refused_start = keel("codec-server", "--port", str(port), env=no_key)
    assert refused_start.returncode == 2 and "KEEL_ENCRYPTION_KEY" in refused_start.stderr
    with codec_server(codec_env, port) as proc:
        endpoint = f"http://127.0.0.1:{port}"
        assert proc.stdout is not None
        printed = ""
        while f"{endpoint}/" not in printed:
            line = proc.stdout.readline()
            assert line, printed
            printed += line
        with_secret = printed.split(f"{endpoint}/", 1)[1].split()[0]

        def show(*auth: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    find_temporal_cli() or "temporal",
                    "workflow",
                    "show",
                    "-w",
                    session,
                    "--address",
                    address,
                    "--output",
                    "json",
                    "--codec-endpoint",
                    endpoint,
                    *auth,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )

        clear = show("--codec-auth", "Bearer s3cret")
        assert clear.returncode == 0, clear.stderr
        assert CANARY.encode() in json_payload_data(clear.stdout)
        assert "encryption-key-id" not in clear.stdout
        # the endpoint URL it printed needs no header (what the Web UI uses)
        endpoint = f"{endpoint}/{with_secret}"
        clear = show()
        assert clear.returncode == 0, clear.stderr
        assert CANARY.encode() in json_payload_data(clear.stdout)
        endpoint = f"http://127.0.0.1:{port}"
        for auth in (("--codec-auth", "Bearer wrong"),):
            refused = show(*auth)
            assert refused.returncode != 0 or "encryption-key-id" in refused.stdout
            assert CANARY not in refused.stdout + refused.stderr
        # the Web UI's preflight: CORS for its origin, no token needed for OPTIONS
        preflight = urllib.request.Request(
            f"{endpoint}/decode",
            method="OPTIONS",
            headers={
                "Origin": "http://localhost:8233",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
            },
        )
        with urllib.request.urlopen(preflight, timeout=10) as answer:
            assert answer.headers["access-control-allow-origin"] == "http://localhost:8233"


def test_keel_run_says_why_a_worker_with_another_key_makes_no_progress(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    model = write_script(tmp_path / "s.json", [respond(text("hello"))])
    env = {**server_env, "KEEL_ENCRYPTION_KEY": new_key(), "KEEL_STORE": store}
    with keel_worker(env | {"KEEL_ENCRYPTION_KEY": new_key()}, SAMPLE_TOOLS):
        run = keel_popen(
            "run",
            "--model",
            model,
            "--progress",
            "hi",
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        guard = threading.Timer(90, run.kill)  # never wait forever for the line
        guard.start()
        try:
            assert run.stderr is not None
            line = run.stderr.readline()
            while line and "keeps failing" not in line:
                line = run.stderr.readline()
        finally:
            guard.cancel()
            run.kill()
            run.wait(timeout=30)
    assert "its workflow task keeps failing on the worker" in line, line
    assert "different keys" in line, line
