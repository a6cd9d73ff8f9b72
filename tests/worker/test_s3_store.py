"""The S3 conversation store against a local S3-compatible server (moto).

Two worker processes share it, and one conversation spans several runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, Message, SessionConfig, open_store
from keel.activities.store import StoreMissing
from keel.activities.store import s3 as s3_backend
from tests.helpers.cli import keel_env, worker_process
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port, run_histories

BUCKET = "keel-conversations"


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3_backend.reset_client()
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    try:
        yield env
    finally:
        s3_backend.reset_client()
        server.stop()


def test_s3_store_round_trip_and_missing_objects(s3_env: dict[str, str]) -> None:
    store = open_store(f"s3://{BUCKET}/unit")
    messages = [
        Message.model_validate({"role": "user", "content": [{"text": f"m{i}"}]}) for i in range(3)
    ]
    first = store.extend(None, messages[:2])
    second = store.extend(first, messages[2:])
    assert second is not None and second.count == 3
    assert open_store(f"s3://{BUCKET}/unit").load(second) == messages  # a cold reader
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert all(k.startswith("unit/") for k in keys) and len(keys) == 5  # 3 messages, 2 segments
    boto3.client("s3").delete_object(Bucket=BUCKET, Key=next(k for k in keys if "/msg/" in k))
    with pytest.raises(StoreMissing, match="is missing from s3://"):
        open_store(f"s3://{BUCKET}/unit").load(second)


async def test_two_worker_processes_share_the_s3_store(
    s3_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    cycles = 12
    model = write_script(
        tmp_path / "s.json",
        [respond(tool_use(f"t{i}", "whoami"), stop="tool_use") for i in range(cycles)]
        + [respond(text("shared store works"))],
    )
    queue = f"s3-{uuid.uuid4().hex[:8]}"
    prefix = f"run-{uuid.uuid4().hex[:6]}"
    env = keel_env(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        KEEL_TASK_QUEUE=queue,
        KEEL_STORE=f"s3://{BUCKET}/{prefix}",
        **s3_env,
    )
    workers = [worker_process(env, SAMPLE_TOOLS) for _ in range(2)]
    try:
        time.sleep(1.0)
        keel = KeelClient(temporal_env.client, queue, open_store(f"s3://{BUCKET}/{prefix}"))
        session = f"s3-{uuid.uuid4().hex[:8]}"
        config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS], continue_as_new_events=40)
        record = await keel.run(session, "who are you", config=config, timeout_s=120)
        state = await keel.state(session)
    finally:
        for proc in workers:
            proc.terminate()
        stderr = [proc.communicate(timeout=30)[1] for proc in workers]
    assert record.status == "completed", (record.error, stderr)
    assert state.run > 1, "the session should have continued as new"
    assert len(state.messages) == 2 * cycles + 2  # one conversation across runs, from S3
    keys = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/msg/")
    assert keys["KeyCount"] >= 2 * cycles + 1
    # both workers took part: activity-started events name the worker that ran each one
    identities = {
        e.activity_task_started_event_attributes.identity
        for history in await run_histories(temporal_env.client, session)
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    }
    assert len(identities) == 2, identities
