"""The Temporal server itself stops mid-turn and starts again on the same database."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keel import KeelClient, connect
from keel.worker.server.devserver import DevServer, DevServerError
from tests.faults.harness import PROMPT, ROOT, Outcome, Run, respond, text, worker_env

pytestmark = pytest.mark.timeout(180)


def bindable(port: int) -> bool:
    """Whether a server can listen on the port: with SO_REUSEADDR, as Temporal's server binds."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_session_resumes_after_the_server_restarts(tmp_path: Path) -> None:
    data = tmp_path / "temporal"
    first = DevServer(data, ui=False, log_level="error")
    await first.start()
    second: DevServer | None = None
    client = await connect(first.address, "default")
    run = Run(client, first.address, tmp_path / "run", "server_restart")
    outcome = Outcome(name="server_restart", kill_point="server restart")
    try:
        # the tool finishes while the server is down: its completion cannot be delivered
        config = run.config(
            [respond(run.effect("s1", hold_s=1.0), stop="tool_use"), respond(text("done"))]
        )
        worker = run.start_worker()
        ack = await run.keel.prompt(run.session, PROMPT, config=config)
        await run.until(lambda: run.steps("s1", "start") == 1, "the tool to start")
        await run.assert_no_dangling_now()
        stopped = time.monotonic()
        await first.stop()
        await run.until(lambda: run.steps("s1", "done") == 1, "the tool to finish", 30)
        await asyncio.sleep(1.0)
        assert not first.running
        second = DevServer(data, port=first.port, ui=False, log_level="error")
        await second.start()
        outcome.notes.append(f"server down for {time.monotonic() - stopped:.1f}s")
        client = await connect(second.address, "default")
        run.client = client
        run.keel = KeelClient(client, run.task_queue, run.keel.store)
        if worker.proc.poll() is not None:  # a worker may give up on a vanished server
            outcome.notes.append(f"the worker exited with {worker.proc.returncode}")
            run.start_worker()
        await run.finish(ack.turn_id, outcome, stopped)
        print(f"\nserver_restart_turn_s {outcome.turn_s:.2f} s ({'; '.join(outcome.notes)})")
        state = await run.keel.state(run.session)
        assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    finally:
        run.stop_all()
        if second is not None:
            await second.stop()
        await first.stop()


async def test_dev_server_restarts_on_its_own_port_at_once(tmp_path: Path) -> None:
    """Connections of the stopped server linger in TIME_WAIT; the port is still usable."""
    first = DevServer(tmp_path / "temporal", ui=False, log_level="error")
    await first.start()
    env = worker_env(first.address, "restart-port", tmp_path / "store", tmp_path / "log")
    worker = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", "tests.sample_tools"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    second = DevServer(tmp_path / "temporal", port=first.port, ui=False, log_level="error")
    try:
        await asyncio.sleep(3)  # the worker is polling: the server holds its connections
        await first.stop()
        assert bindable(first.port)  # Temporal's server could listen here again
        try:
            await second.start()
        except DevServerError as err:
            pytest.fail(str(err))
    finally:
        worker.kill()
        worker.wait()
        await second.stop()
