"""A user's app laid out as Temporal's samples lay one out runs Keel through ``from keel``.

The folder ``docs/examples/samples-app`` has its own ``workflows.py``, ``activities.py``,
``worker.py`` and ``starter.py``: names Keel itself once installed as top-level modules. It
is copied outside the repository and run as a person runs it, each script a subprocess with
that folder as its working directory: a plain temporalio ``Worker`` with ``KeelPlugin``,
serving the user's workflow (which calls ``run_agent``) and the user's own activity.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from keel.worker.process.sandbox import PASSTHROUGH_MODULES

APP = Path(__file__).resolve().parents[1] / "docs" / "examples" / "samples-app"


def test_the_sandbox_passes_through_only_keels_own_modules_by_full_name() -> None:
    assert "keel.workflows" in PASSTHROUGH_MODULES
    for name in ("workflows", "activities", "worker", "keel"):
        assert name not in PASSTHROUGH_MODULES


async def test_a_samples_style_app_runs_an_agent_and_its_own_activity(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    app = tmp_path / "my-app"
    shutil.copytree(APP, app)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KEEL_HOME", "KEEL_STORE")
    }
    env |= {
        "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "TASK_QUEUE": f"samples-{uuid.uuid4().hex[:8]}",
        "KEEL_STREAM_LISTEN": "off",
    }
    worker = subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=app,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = await asyncio.to_thread(worker.stdout.readline)  # type: ignore[union-attr]
        assert started.startswith("worker on"), started + (worker.stdout.read() or "")  # type: ignore[union-attr]
        for _ in range(2):
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "starter.py", "otters"],
                cwd=app,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            # temporalio's core threads can race the interpreter's exit (SIGABRT in
            # PyGILState_Release after the script's work is done): such a run is run again
            if "PyGILState_Release" not in done.stderr:
                break
    finally:
        worker.terminate()
        rest, _ = worker.communicate(timeout=20)
    assert done.returncode == 0, done.stderr + rest
    assert done.stdout.strip() == "OTTERS HOLD HANDS WHILE THEY SLEEP!"
    # the agent's child session stored its conversation under the app's own folder
    assert (app / ".keel" / "store").is_dir()
