"""``keel run --effect TOOL=CLASS`` (over an agent file's ``effects``) reaches the session."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from keel.worker.cli.main import run_cli
from tests.helpers.fixture_types import RunWorker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script


async def test_run_sends_the_classes_of_its_flags_and_agent_file(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    run_worker: RunWorker,
    keel: KeelClient,
) -> None:
    for name in list(os.environ):
        if name.startswith(("TEMPORAL_", "KEEL_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    monkeypatch.setenv("KEEL_TASK_QUEUE", task_queue)
    monkeypatch.setenv("KEEL_STORE", str(tmp_path / "store"))
    model = write_script(tmp_path / "m.json", [respond(text("done"))])
    agent = tmp_path / "agent.toml"
    agent.write_text(
        f'model = "{model}"\ntools = ["{SAMPLE_TOOLS}"]\n'
        'effects = { echo = "write", record = "idempotent" }\n'
    )
    session = f"fx-{uuid.uuid4().hex[:8]}"
    argv = ["run", "--detach", "--session", session, "--agent", str(agent)]
    argv += ["--effect", "echo=read", "--effect", "lookup=idempotent", "go"]
    async with run_worker():
        code = await asyncio.to_thread(run_cli, argv)
        assert code == 0, capsys.readouterr().err
        config = await keel.config(session)
    assert config.tool_effects == {"echo": "read", "record": "idempotent", "lookup": "idempotent"}
    bad = await asyncio.to_thread(run_cli, ["run", "--agent", str(agent), "--effect", "x=no", "go"])
    assert bad == 2
    assert "--effect: tool 'x': effect 'no' is not one of read, idempotent, write" in (
        capsys.readouterr().err
    )
