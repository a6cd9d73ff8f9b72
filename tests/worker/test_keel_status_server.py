"""``KeelStatus`` and the server: one without it runs sessions, and the worker says so;
``keel dev``'s server has it, on a database made before too."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

import temporalio.api.operatorservice.v1 as osv1
from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.worker.client.status_attribute import start_attributes, status_support
from keel.worker.server.devserver import DevServer, find_temporal_cli
from keel.workflows.status_attribute import KEEL_STATUS
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import dev_server, free_port


async def test_a_server_without_keel_status_runs_sessions_and_the_worker_says_so(
    tmp_path: Path,
) -> None:
    async with dev_server(keel_status=False) as env:
        client = env.client
        support = await status_support(client)
        assert not support.present and "has no KeelStatus" in (support.problem or "")
        assert await start_attributes(client) is None
        queue = f"nostatus-{uuid.uuid4().hex[:8]}"
        store = tmp_path / "store"
        log = tmp_path / "worker.log"
        env_vars = keel_env(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            KEEL_TASK_QUEUE=queue,
            KEEL_STORE=str(store),
        )
        with log.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
                env=env_vars,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            deadline = time.monotonic() + 30
            while "KeelStatus" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
            notice = log.read_text()
            assert "has no KeelStatus" in notice
            assert "temporal operator search-attribute create" in notice
            assert "--name KeelStatus --type Keyword" in notice
            model = write_script(
                tmp_path / "s.json",
                [respond(tool_use("e", "echo", text="hi"), stop="tool_use"), respond(text("ok"))],
            )
            keel = KeelClient(client, queue, open_store(str(store)))
            session = f"nostatus-{uuid.uuid4().hex[:8]}"
            config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
            record = await keel.run(session, "hello", config=config, timeout_s=60)
            assert record.status == "completed", record.error
            described = await client.get_workflow_handle(session).describe()
            assert described.typed_search_attributes.get(KEEL_STATUS) is None
            history = await client.get_workflow_handle(session).fetch_history()
            upserts = [
                e.upsert_workflow_search_attributes_event_attributes.search_attributes
                for e in history.events
                if e.HasField("upsert_workflow_search_attributes_event_attributes")
            ]
            assert not [u for u in upserts if KEEL_STATUS.name in u.indexed_fields]
        finally:
            proc.terminate()
            proc.wait(timeout=30)


async def test_keel_devs_server_has_keel_status_on_an_older_database_too(tmp_path: Path) -> None:
    data_dir = tmp_path / "keel"
    data_dir.mkdir()
    cli = find_temporal_cli()
    assert cli
    port = free_port()
    # a database a dev server made without the attribute (an older Keel's)
    older = subprocess.Popen(
        [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
        + ["--http-port", str(free_port()), "--db-filename", str(data_dir / "temporal.db")]
        + ["--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = None
        for _ in range(100):
            try:
                client = await Client.connect(f"127.0.0.1:{port}")
                break
            except RuntimeError:
                await asyncio.sleep(0.2)
        assert client is not None
        listed = await client.operator_service.list_search_attributes(
            osv1.ListSearchAttributesRequest(namespace="default")
        )
        assert "KeelStatus" not in listed.custom_attributes
    finally:
        older.terminate()
        older.wait(timeout=30)
    async with DevServer(data_dir, ui=False, adopt_database=True, startup_timeout_s=30) as server:
        client = await Client.connect(server.address)
        assert (await status_support(client)).present
