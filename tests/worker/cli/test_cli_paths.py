"""Paths typed on the command line mean what the person typed, wherever the worker runs."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from keel.worker.client.paths import local_path, sendable_model_spec, sendable_path
from tests.helpers.cli import keel, keel_env
from tests.helpers.scripts import respond, text
from tests.helpers.temporal import free_port


def test_a_relative_path_is_sent_absolute_when_the_file_is_here(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "s.json").write_text("{}")
    assert sendable_path("scripts/s.json", cwd=tmp_path) == str(tmp_path / "scripts" / "s.json")
    assert sendable_model_spec("scripted:scripts/s.json", cwd=tmp_path) == (
        f"scripted:{tmp_path / 'scripts' / 's.json'}"
    )
    # not here: as typed, for a worker elsewhere to read relative to its own directory
    assert sendable_model_spec("scripted:elsewhere.json", cwd=tmp_path) == "scripted:elsewhere.json"
    # absolute, or not a file: unchanged
    assert sendable_model_spec("scripted:/opt/s.json", cwd=tmp_path) == "scripted:/opt/s.json"
    assert sendable_model_spec("bedrock:scripts/s.json", cwd=tmp_path) == "bedrock:scripts/s.json"
    assert local_path("~/x.json") == Path.home() / "x.json"


@pytest.fixture
def dev_elsewhere(tmp_path: Path) -> Iterator[dict[str, str]]:
    """``keel dev`` running in directory A; the environment of a client that talks to it."""
    a = tmp_path / "a"
    a.mkdir()
    port = free_port()
    home = tmp_path / "home"
    env = keel_env(KEEL_HOME=str(home))
    dev = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "dev", "--port", str(port)],
        env=env,
        cwd=a,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # keel dev prints where Temporal is once its server and worker are up
        ready, _, _ = select.select([dev.stdout], [], [], 60)
        assert ready and dev.stdout is not None, "keel dev did not start"
        assert "Temporal at" in dev.stdout.readline(), dev.communicate(timeout=10)
        yield keel_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", KEEL_HOME=str(home))
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=60)
    assert dev.returncode == 0


def test_scripted_file_relative_to_the_client_with_dev_in_another_directory(
    dev_elsewhere: dict[str, str], tmp_path: Path
) -> None:
    b = tmp_path / "b"
    (b / "scripts").mkdir(parents=True)
    # the model's i-th answer is for a conversation with i assistant messages: one imported
    (b / "scripts" / "s.json").write_text(
        json.dumps({"responses": [respond(text("not used")), respond(text("from B"))]})
    )
    (b / "history.json").write_text(
        json.dumps(
            [
                {"role": "user", "content": [{"text": "earlier"}]},
                {"role": "assistant", "content": [{"text": "noted"}]},
            ]
        )
    )
    done = keel(
        "run",
        "--json",
        "--model",
        "scripted:scripts/s.json",
        "--messages",
        "history.json",
        "hi",
        env=dev_elsewhere,
        cwd=b,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["message"]["content"] == [{"text": "from B"}]
    shown = keel("show", "--json", result["session"], env=dev_elsewhere, cwd=b)
    assert [m["content"][0]["text"] for m in json.loads(shown.stdout)["messages"]] == [
        "earlier",
        "noted",
        "hi",
        "from B",
    ]


def test_a_file_only_the_worker_has_is_sent_as_typed(
    dev_elsewhere: dict[str, str], tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    (a / "worker-side.json").write_text(json.dumps({"responses": [respond(text("from A"))]}))
    done = keel(
        "run", "--json", "--model", "scripted:worker-side.json", "hi", env=dev_elsewhere, cwd=b
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["message"]["content"] == [{"text": "from A"}]
    assert done.stderr.strip() == (
        f"keel: note: scripted model file 'worker-side.json' is not in {b}; sent as typed, "
        "for the worker to read relative to its own working directory"
    )
