"""A worker started after one that died gives back the attempts it left running, at once.

The session's heartbeat timeout here is 120 s: without the in-flight journal, a model call
whose worker was SIGKILLed would wait that long before Temporal retried it. The next worker
reclaims it as it starts (``keel.worker.process.inflight``), and the turn goes on within
seconds. A live worker's attempts are never taken; hostile or broken journals are ignored.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel.worker.process import inflight
from keel.worker.process.inflight import (
    COMPACT_BYTES,
    InflightJournal,
    JournalName,
    inflight_dir,
    left_running,
    reclaim_lost,
)
from keel.worker.process.pids import boot_id, same_process, started_at
from keel.workflows.activity_options import MODEL_ACTIVITY, WORKER_LOST
from tests.helpers.cli import keel_env, worker_process
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script

# Far longer than the test waits: only the reclaim can hand the call on in time.
HEARTBEAT_TIMEOUT_S = 120
SLOW_CALL_S = 6.0
# worker processes start slowly on a loaded 2-core machine (over 60 s seen in a full run)
pytestmark = pytest.mark.timeout(300)


def start_worker(env: dict[str, str]) -> subprocess.Popen[str]:
    return worker_process(env, SAMPLE_TOOLS)


@pytest.fixture
def env(temporal_address: str, tmp_path: Path) -> dict[str, str]:
    return keel_env(
        TEMPORAL_ADDRESS=temporal_address,
        KEEL_TASK_QUEUE=f"inflight-{uuid.uuid4().hex[:8]}",
        XDG_STATE_HOME=str(tmp_path / "state"),
    )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


@pytest.fixture
def temporal_address(client: Client) -> str:
    return client.service_client.config.target_host


async def slow_turn(client: Client, env: dict[str, str], tmp_path: Path) -> str:
    """A session on env's queue whose one model call takes SLOW_CALL_S; its id."""
    from keel import KeelClient, SessionConfig

    model = write_script(
        tmp_path / f"slow-{uuid.uuid4().hex[:6]}.json",
        [respond(text("done at last"), delay_s=SLOW_CALL_S)],
    )
    config = SessionConfig(
        model=model, tool_modules=[SAMPLE_TOOLS], heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S
    )
    session = f"inflight-{uuid.uuid4().hex[:8]}"
    keel = KeelClient(client, env["KEEL_TASK_QUEUE"])
    await keel.prompt(session, "go", config=config)
    return session


async def until_model_call_runs(client: Client, session: str, deadline_s: float = 60) -> None:
    """Wait until the session's model call has started on a worker."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        described = await client.get_workflow_handle(session).describe()
        pending = described.raw_description.pending_activities
        if any(
            p.activity_type.name == MODEL_ACTIVITY and p.last_started_time.seconds for p in pending
        ):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the model call of {session} never started")


async def until_journaled(env: dict[str, str], deadline_s: float = 30) -> list[Path]:
    """The journals once one holds a running attempt.

    Temporal says an attempt started when the worker's poll took it; the worker journals
    it a moment later, as the interceptor runs it (a moment a loaded machine stretches).
    """
    end = time.monotonic() + deadline_s
    while True:
        journals = list(inflight_dir(env["XDG_STATE_HOME"]).glob("*.log"))
        if any(left_running(j) for j in journals) or time.monotonic() > end:
            return journals
        await asyncio.sleep(0.1)


async def model_attempts(client: Client, session: str) -> list[tuple[int, str]]:
    """Each model call's final attempt and the type of the failure before it ('' if none)."""
    found = []
    async for event in client.get_workflow_handle(session).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            failure = started.last_failure.application_failure_info.type
            found.append((started.attempt, failure))
    return found


async def test_a_restarted_worker_takes_back_its_dead_predecessors_call(
    client: Client, env: dict[str, str], workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    from keel import KeelClient

    workers.append(start_worker(env))
    session = await slow_turn(client, env, tmp_path)
    await until_model_call_runs(client, session)
    journals = await until_journaled(env)
    assert len(journals) == 1 and len(left_running(journals[0])) == 1, journals
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(timeout=30)
    killed = time.monotonic()
    workers.append(start_worker(env))
    keel = KeelClient(client, env["KEEL_TASK_QUEUE"])
    turn = await keel.wait_turn(session, 1, timeout_s=60)
    took = time.monotonic() - killed
    assert turn.status == "completed" and turn.message is not None, turn
    assert turn.message.content[0].text == "done at last"
    # a worker's start, the 0.25 s retry and a second slow call: far under the 120 s
    assert took < 45, took
    assert (await model_attempts(client, session)) == [(2, WORKER_LOST)]
    assert list(inflight_dir(env["XDG_STATE_HOME"]).glob(f"*.{workers[0].pid}.*")) == []


async def test_a_worker_beside_a_dead_one_takes_back_its_call(
    client: Client, env: dict[str, str], workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    """A worker already running on the machine looks for dead workers' journals every
    second: it takes the call over without a restart, long before the heartbeat timeout."""
    from keel import KeelClient

    workers.extend([start_worker(env), start_worker(env)])
    await until_pollers(client, env["KEEL_TASK_QUEUE"], 2)
    session = await slow_turn(client, env, tmp_path)
    await until_model_call_runs(client, session)
    await until_journaled(env)
    running = await running_on(client, session, workers)
    running.send_signal(signal.SIGKILL)
    running.wait(timeout=30)
    killed = time.monotonic()
    turn = await KeelClient(client, env["KEEL_TASK_QUEUE"]).wait_turn(session, 1, timeout_s=60)
    assert turn.status == "completed" and time.monotonic() - killed < 45
    assert (await model_attempts(client, session)) == [(2, WORKER_LOST)]


async def running_on(
    client: Client, session: str, workers: list[subprocess.Popen[str]]
) -> subprocess.Popen[str]:
    """The worker process whose identity (``pid@host``) runs the session's model call."""
    described = await client.get_workflow_handle(session).describe()
    [pending] = [
        p
        for p in described.raw_description.pending_activities
        if p.activity_type.name == MODEL_ACTIVITY
    ]
    pid = int(pending.last_worker_identity.split("@", 1)[0])
    [proc] = [w for w in workers if w.pid == pid]
    return proc


async def until_pollers(client: Client, task_queue: str, count: int) -> None:
    """Wait until ``count`` workers poll the task queue for activities."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    end = time.monotonic() + 150
    while time.monotonic() < end:
        described = await client.workflow_service.describe_task_queue(request)
        if len({p.identity for p in described.pollers}) >= count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"fewer than {count} workers poll {task_queue}")


async def test_a_call_cut_off_by_a_graceful_stop_goes_on_at_once_elsewhere(
    client: Client,
    env: dict[str, str],
    workers: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """SIGTERM: once the shutdown grace runs out, temporalio fails the running call as
    ``WorkerShutdown``, which Temporal retries at once: no journal, no heartbeat timeout."""
    from keel import KeelClient

    stopping = env | {"KEEL_SHUTDOWN_GRACE_S": "0.5"}
    # the other worker runs on another machine: no journal of the first one to read
    elsewhere = stopping | {"XDG_STATE_HOME": str(tmp_path / "elsewhere")}
    workers.extend([start_worker(stopping), start_worker(elsewhere)])
    await until_pollers(client, env["KEEL_TASK_QUEUE"], 2)
    session = await slow_turn(client, env, tmp_path)
    await until_model_call_runs(client, session)
    running = await running_on(client, session, workers)
    running.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert running.wait(timeout=60) == 0
    turn = await KeelClient(client, env["KEEL_TASK_QUEUE"]).wait_turn(session, 1, timeout_s=60)
    assert turn.status == "completed" and time.monotonic() - stopped < 45
    assert (await model_attempts(client, session)) == [(2, "WorkerShutdown")]


async def test_a_live_workers_call_is_left_alone(
    client: Client, env: dict[str, str], workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    from keel import KeelClient

    workers.append(start_worker(env))
    session = await slow_turn(client, env, tmp_path)
    await until_model_call_runs(client, session)
    assert any(left_running(j) for j in await until_journaled(env))  # there is one to take
    # another worker starts beside it, as a fleet scales: it must not take the running call
    assert await reclaim_lost(client, env["XDG_STATE_HOME"]) == 0
    workers.append(start_worker(env))
    keel = KeelClient(client, env["KEEL_TASK_QUEUE"])
    turn = await keel.wait_turn(session, 1, timeout_s=60)
    assert turn.status == "completed"
    assert (await model_attempts(client, session)) == [(1, "")]


def test_the_journal_keeps_what_runs_and_starts_over_when_nothing_does(tmp_path: Path) -> None:
    kept = InflightJournal(tmp_path / "inflight", inflight.server_key("here:7233", "default"))
    kept.started(b"one")
    kept.started(b"two")
    kept.ended(b"one")
    assert left_running(kept.path) == [b"two"]
    assert oct(kept.path.stat().st_mode & 0o777) == "0o600"
    assert oct(kept.path.parent.stat().st_mode & 0o777) == "0o700"
    name = JournalName.parse(kept.path.name)
    assert name is not None and name.pid == os.getpid() and name.runs()
    big = b"x" * 1000
    for i in range(COMPACT_BYTES // 1000 + 1):
        kept.started(big + bytes([i % 256]))
        kept.ended(big + bytes([i % 256]))
    kept.ended(b"two")  # the last one running ends, the journal is long: it starts over
    assert kept.path.stat().st_size == 0 and left_running(kept.path) == []


def test_a_process_is_told_from_a_later_one_with_its_pid() -> None:
    me = os.getpid()
    started = started_at(me)
    assert started is not None and same_process(me, started, boot_id())
    assert not same_process(me, started + 1, boot_id())
    assert not same_process(me, started, "another boot")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert not same_process(int(gone.stdout), 0, boot_id())


async def test_hostile_and_broken_journals_are_ignored(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = inflight_dir(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    namespace = inflight.client_server_key(client)
    dead = JournalName(inflight._boot_key(), 999_999_999, 1, namespace)
    # a dead worker's journal: garbage lines, and a token Temporal does not know
    (directory / dead.file).write_bytes(
        b"+" + base64.b64encode(b"not a task token") + b"\n" + b"+%%%\n" + b"garbage\n"
    )
    # a link planted to another file: never read, never removed through
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    linked = JournalName(inflight._boot_key(), 999_999_998, 1, namespace)
    os.symlink(target, directory / linked.file)
    # files that are no journals
    (directory / "notes.txt").write_text(json.dumps({"a": 1}))
    assert await reclaim_lost(client, tmp_path) == 0
    assert not (directory / dead.file).exists()  # read, passed over, removed
    assert target.read_text() == "keep me"
    assert (directory / "notes.txt").exists()


async def test_a_dead_workers_journal_of_another_server_is_left_to_that_servers_workers(
    client: Client, tmp_path: Path
) -> None:
    """Two dev servers on one machine both have a ``default`` namespace: a worker of one must
    not take (and lose) what a dead worker of the other left running, whose tokens it cannot
    give back; a worker of that other server still finds it."""
    directory = inflight_dir(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    other = inflight.server_key("127.0.0.1:1", client.namespace)
    assert other != inflight.client_server_key(client)
    dead = JournalName(inflight._boot_key(), 999_999_997, 1, other)
    (directory / dead.file).write_bytes(b"+" + base64.b64encode(b"a token of the other") + b"\n")
    assert await reclaim_lost(client, tmp_path) == 0
    assert (directory / dead.file).exists()
    assert left_running(directory / dead.file) == [b"a token of the other"]


async def test_a_dead_workers_journal_with_nothing_running_is_removed_whatever_its_server(
    client: Client, tmp_path: Path
) -> None:
    """Journals of other servers (an embedded server on another port, a test's) would pile
    up, and every worker looks at each every second: one with nothing left running helps
    nobody, so any worker removes it."""
    directory = inflight_dir(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    token = base64.b64encode(b"ended")
    for pid, server in (
        (999_999_996, inflight.server_key("127.0.0.1:2", client.namespace)),
        (999_999_995, inflight.client_server_key(client)),
    ):
        dead = JournalName(inflight._boot_key(), pid, 1, server)
        (directory / dead.file).write_bytes(b"+" + token + b"\n-" + token + b"\n")
    assert await reclaim_lost(client, tmp_path) == 0
    assert list(directory.iterdir()) == []
