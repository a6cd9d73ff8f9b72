"""The notice a command prints while its request waits for a worker names the right remedy.

A command with a Temporal of its own (``keel dev``, ``TEMPORAL_ADDRESS``) tells the person to
start a worker. A command that embeds the server runs the session's worker itself: a slow
start of that worker (a loaded machine) must not send a newcomer off to start another one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest
from temporalio.testing import WorkflowEnvironment

from keel import SessionConfig
from keel.worker.cli.session_access import START_A_WORKER, keel_client
from keel.worker.server.connection import TemporalConnection
from keel.worker.server.devserver import DevServer
from keel.worker.settings import Settings


@pytest.mark.parametrize("embedded", [False, True], ids=["own-temporal", "embedded"])
async def test_the_notice_suggests_a_worker_only_when_one_is_missing(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    embedded: bool,
) -> None:
    """A prompt to a session no worker runs: the command's stderr within 15 s."""
    client = temporal_env.client
    settings = Settings.from_env({"KEEL_HOME": str(tmp_path), "KEEL_TASK_QUEUE": task_queue})
    server = cast(DevServer, object()) if embedded else None  # only asked whether it is there
    keel = keel_client(
        TemporalConnection(client, "-", settings, server=server), wait_for_worker=True
    )
    session = f"notice-{task_queue[-8:]}"
    prompt = asyncio.create_task(
        keel.prompt(session, "hello", config=SessionConfig(model="scripted:x.json"))
    )
    err = ""
    try:
        deadline = asyncio.get_running_loop().time() + 15
        while "waiting for a worker" not in err:
            assert not prompt.done(), prompt
            assert asyncio.get_running_loop().time() < deadline, "no notice in 15 s"
            await asyncio.sleep(0.2)
            err += capsys.readouterr().err
    finally:
        prompt.cancel()
        await asyncio.gather(prompt, return_exceptions=True)
        await client.get_workflow_handle(session).terminate("test over")
    [line] = [s for s in err.splitlines() if "waiting for a worker" in s]
    assert f"on task queue {task_queue!r}" in line, line
    if embedded:  # no command to start: this one's worker is the one
        assert "`keel" not in line, line
        assert line.endswith("this command runs that worker itself, which has not answered yet")
    else:
        assert line.endswith(START_A_WORKER), line
