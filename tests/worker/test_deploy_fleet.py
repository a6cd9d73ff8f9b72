"""A fleet: two ``keel worker`` processes on one task queue and one shared store.

Sessions spread across both, and when one worker is killed (SIGKILL, no goodbye) while it
runs tools, the other carries every session to the end: the lost tool runs time out on
their heartbeat and are retried there.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, SessionConfig, open_store
from keel.workflows.activity_options import TOOL_ACTIVITY
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

SESSIONS = 6


async def activity_identities(client: Client, session: str) -> list[tuple[str, str, int]]:
    """(activity type, worker identity, attempt) of each activity that finished."""
    events = (await client.get_workflow_handle(session).fetch_history()).events
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    return [
        (
            scheduled[e.activity_task_started_event_attributes.scheduled_event_id],
            e.activity_task_started_event_attributes.identity,
            e.activity_task_started_event_attributes.attempt,
        )
        for e in events
        if e.HasField("activity_task_started_event_attributes")
    ]


async def running_tools(client: Client, sessions: list[str]) -> dict[str, str]:
    """Session -> identity of the worker running its tool now."""
    found = {}
    for session in sessions:
        description = await client.get_workflow_handle(session).describe()
        for pending in description.raw_description.pending_activities:
            if (
                pending.activity_type.name == TOOL_ACTIVITY
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            ):
                found[session] = pending.last_worker_identity
    return found


async def test_sessions_spread_across_workers_and_survive_losing_one(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = temporal_env.client
    queue = f"fleet-{uuid.uuid4().hex[:8]}"
    store = tmp_path / "shared-store"
    env = keel_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        KEEL_TASK_QUEUE=queue,
        KEEL_STORE=str(store),
        KEEL_SHUTDOWN_GRACE_S="1",
        # three activities at once per worker: six slow tools must spread three and three
        KEEL_MAX_CONCURRENT_ACTIVITIES=str(SESSIONS // 2),
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"worker-{n}.log").open("w"),
        )
        for n in range(2)
    ]
    identities = [f"{w.pid}@{socket.gethostname()}" for w in workers]
    keel = KeelClient(client, queue, open_store(str(store)))
    model = write_script(
        tmp_path / "s.json",
        [
            respond(tool_use("long", "slow", seconds=4.0, label="survived"), stop="tool_use"),
            respond(text("done")),
        ],
    )
    config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
    sessions = [f"fleet-{uuid.uuid4().hex[:8]}" for _ in range(SESSIONS)]
    try:
        time.sleep(1.0)  # both workers polling
        acks = await asyncio.gather(*(keel.prompt(s, "work", config=config) for s in sessions))

        # wait until the slow tools run, then kill a worker that is running some of them
        deadline = time.monotonic() + 30
        while len(running := await running_tools(client, sessions)) < SESSIONS:
            assert time.monotonic() < deadline, running
            await asyncio.sleep(0.2)
        assert sorted(running.values()) == sorted(identities * (SESSIONS // 2)), running
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        lost = {s for s, identity in running.items() if identity == identities[0]}

        records = await asyncio.gather(
            *(
                keel.wait_turn(s, ack.turn_id, timeout_s=60)
                for s, ack in zip(sessions, acks, strict=True)
            )
        )
        states = [await keel.state(session) for session in sessions]  # queries need a worker
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers:
            proc.wait(timeout=30)
    assert [r.status for r in records] == ["completed"] * SESSIONS, [r.error for r in records]
    for state in states:
        result = state.messages[-2].content[0].toolResult
        assert result is not None and result.content[0].text == "survived"

    ran: list[tuple[str, str, int]] = []
    for session in sessions:
        ran += await activity_identities(client, session)
    # History names the worker of each activity's last attempt only: the killed worker may
    # have finished nothing (the spread is shown above, by the tools both were running).
    finished_by = {identity for _, identity, _ in ran}
    assert identities[1] in finished_by and finished_by <= set(identities), finished_by
    # every tool lost with the killed worker was retried, and finished, on the other one
    for session in lost:
        slow = [r for r in await activity_identities(client, session) if r[0] == TOOL_ACTIVITY]
        assert slow[-1][1:] == (identities[1], 2), slow
