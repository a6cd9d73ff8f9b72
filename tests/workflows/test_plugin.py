"""KeelPlugin on a plain temporalio Worker, next to a user's workflow that calls run_agent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from keel import ConversationStore, Interrupt, KeelClient, KeelPlugin
from keel.activities.tools import ToolModuleError
from keel.worker.process.stream_server import StreamConfig, stream_endpoint
from keel.worker.settings import ConfigError
from tests.fakes.pipeline_workflow import Pipeline, PipelineInput, PipelineResult, prepare, publish
from tests.helpers.encryption import history_payload_data, new_key, store_bytes
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import save_history

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}


async def plugin_client(client: Client, store: ConversationStore) -> Client:
    """A client of the user's own, connected with the plugin only (no Keel converter given)."""
    return await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        plugins=[KeelPlugin(tool_modules=[SAMPLE_TOOLS], store=store)],
    )


async def pending_of(keel: KeelClient, session: str) -> list[Interrupt]:
    for _ in range(200):
        try:
            found = (await keel.pending(session)).interrupts
        except Exception:  # the child may not exist yet
            found = []
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no interrupt in {session}")


async def test_pipeline_with_approval_on_plain_worker(
    client: Client, task_queue: str, store: ConversationStore, script: Script, tmp_path: Path
) -> None:
    draft = tmp_path / "draft.txt"
    config = script(
        [
            respond(tool_use("w1", "guarded_record", path=str(draft), value="v1"), stop="tool_use"),
            respond(
                text("drafted"), tool_use("f1", "final_result", title="On cats"), stop="tool_use"
            ),
        ],
        output_schema=SCHEMA,
    )
    user = await plugin_client(client, store)
    pipeline_id = f"pipeline-{uuid.uuid4().hex[:8]}"
    agent_id = f"{pipeline_id}-writer"
    keel = KeelClient(user, task_queue, store)
    worker = Worker(
        user,
        task_queue=task_queue,
        workflows=[Pipeline],
        activities=[prepare, publish],
        max_cached_workflows=0,
    )
    async with worker:
        handle = await user.start_workflow(
            Pipeline.run,
            PipelineInput(topic="cats", config=config, agent_id=agent_id),
            id=pipeline_id,
            task_queue=task_queue,
            result_type=PipelineResult,
        )
        (interrupt,) = await pending_of(keel, agent_id)
        assert interrupt.tool_use.name == "guarded_record"
        await keel.decide(agent_id, interrupt.id, "approve", approver="ann")
        result = await handle.result()
        state = await keel.state(agent_id)
    await save_history(user, agent_id, "run_agent_child_approval")
    assert result.prepared == "notes on cats"
    assert result.agent.session_id == agent_id and result.agent.status == "completed"
    assert result.agent.output == {"title": "On cats"}
    assert result.published == "published: drafted"
    assert result.agent.usage.totalTokens == 40
    assert draft.read_text() == "v1\n"  # run once, after the approval
    assert state.status == "closed" or state.status == "idle"


async def test_run_agent_default_child_id(
    client: Client, task_queue: str, store: ConversationStore, script: Script
) -> None:
    config = script([respond(text("done"))])
    user = await plugin_client(client, store)
    pipeline_id = f"pipeline-{uuid.uuid4().hex[:8]}"
    async with Worker(
        user, task_queue=task_queue, workflows=[Pipeline], activities=[prepare, publish]
    ):
        result = await user.execute_workflow(
            Pipeline.run,
            PipelineInput(topic="dogs", config=config),
            id=pipeline_id,
            task_queue=task_queue,
            result_type=PipelineResult,
        )
    assert result.agent.session_id.startswith(f"{pipeline_id}/agent-")
    assert result.published == "published: done" and result.agent.output is None


async def test_the_plugin_encrypts_with_the_key_in_the_environment(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_ENCRYPTION_KEY", new_key())
    store_dir = tmp_path / "sealed-store"
    monkeypatch.setenv("KEEL_STORE", str(store_dir))
    canary = f"canary-{uuid.uuid4().hex}"
    config = script([respond(text(f"the answer is {canary}"))])
    user = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        plugins=[KeelPlugin(tool_modules=[SAMPLE_TOOLS])],
    )
    pipeline_id = f"pipeline-{uuid.uuid4().hex[:8]}"
    async with Worker(
        user, task_queue=task_queue, workflows=[Pipeline], activities=[prepare, publish]
    ):
        result = await user.execute_workflow(
            Pipeline.run,
            PipelineInput(topic=canary, config=config),
            id=pipeline_id,
            task_queue=task_queue,
            result_type=PipelineResult,
        )
    assert canary in result.published  # the user's own client reads it back
    child = result.agent.session_id
    for run_of in (pipeline_id, child):
        history = await client.get_workflow_handle(run_of).fetch_history()
        assert canary.encode() not in history_payload_data(history), run_of
    sealed = store_bytes(store_dir)
    assert sealed and canary.encode() not in sealed


async def test_the_plugin_is_the_one_worker_assembly(
    client: Client, task_queue: str, store: ConversationStore
) -> None:
    """A plain Worker with the plugin gets what ``keel worker`` runs with, and keeps its own."""
    from datetime import timedelta

    from keel.worker.process.assembly import build_worker
    from keel.worker.process.interceptors import KeelInterceptor
    from keel.worker.process.plugin import BUILD_ID, HEARTBEAT_THROTTLE
    from keel.worker.process.sandbox import CompiledSandboxRunner

    # one worker per task queue and process: each gets its own
    plain = Worker(
        client, task_queue=task_queue + "-a", plugins=[KeelPlugin([SAMPLE_TOOLS], store=store)]
    )
    built = build_worker(client, task_queue + "-b", [SAMPLE_TOOLS], store=store)
    for worker in (plain, built):
        config = worker.config(active_config=True)
        assert any(isinstance(i, KeelInterceptor) for i in config.get("interceptors", ()))
        assert config.get("sticky_queue_schedule_to_start_timeout") == timedelta(seconds=1)
        assert config.get("build_id") == BUILD_ID
        assert config.get("max_heartbeat_throttle_interval") == HEARTBEAT_THROTTLE
        assert isinstance(config.get("workflow_runner"), CompiledSandboxRunner)
        assert config.get("activity_executor") is not None
        names = {getattr(a, "__temporal_activity_definition").name for a in config["activities"]}
        assert names == {
            "keel.model.converse",
            "keel.tool.run",
            "keel.notify.post",
            "keel.session.child_report",
            "keel.session.forward",
            "keel.judge.decide",
        }
    # what the worker is given explicitly stays
    own = Worker(
        client,
        task_queue=task_queue + "-c",
        build_id="mine",
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=10),
        plugins=[KeelPlugin([SAMPLE_TOOLS], store=store)],
    )
    kept = own.config(active_config=True)
    assert kept.get("build_id") == "mine"
    assert kept.get("sticky_queue_schedule_to_start_timeout") == timedelta(seconds=10)


def listening_sockets() -> set[str]:
    """The inodes of the TCP sockets this process listens on (Linux ``/proc``)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                mine.add(link[len("socket:[") : -1])
    listening = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    listening.add(fields[9])
    return mine & listening


async def test_a_plugin_made_binds_imports_and_opens_nothing_until_a_worker_runs(
    client: Client,
    task_queue: str,
    script: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag = uuid.uuid4().hex[:8]
    marker = tmp_path / "imported"
    module = f"marker_tools_{tag}"
    (tmp_path / f"{module}.py").write_text(
        "from pathlib import Path\n"
        "from keel import tool\n"
        f"Path({str(marker)!r}).write_text('imported')\n"
        f"@tool(name='marker_{tag}')\n"
        "def marked(text: str) -> str:\n"
        '    """Echo."""\n'
        "    return text\n"
    )
    store_dir = tmp_path / "plugin-store"
    monkeypatch.setenv("KEEL_STORE", str(store_dir))
    # a configuration of its own: no other test's endpoint is this one
    monkeypatch.setenv("KEEL_STREAM_ADVERTISE", "127.0.0.1")
    before = listening_sockets()

    plugin = KeelPlugin(tool_modules=[str(tmp_path / f"{module}.py")])
    # a client-only use: connected with the plugin, to talk to sessions
    user = await Client.connect(
        client.service_client.config.target_host, namespace=client.namespace, plugins=[plugin]
    )
    keel = KeelClient(user, task_queue, plugin.store)
    assert listening_sockets() == before
    assert not marker.exists() and module not in sys.modules
    assert not store_dir.exists()
    endpoint = StreamConfig.of("127.0.0.1:0", "127.0.0.1")
    assert stream_endpoint(endpoint) is None

    worker = Worker(user, task_queue=task_queue, max_cached_workflows=0)  # configured here
    assert marker.read_text() == "imported" and module in sys.modules
    assert listening_sockets() == before  # bound when it runs, not when it is built
    async with worker:
        config = script([respond(text("done"))], tool_modules=[module])
        record = await keel.run(f"lazy-{tag}", "go", config=config, timeout_s=30)
        assert record.status == "completed"  # a session, end to end, on the worker
        streams = stream_endpoint(endpoint)
        assert streams is not None
        port = int(streams.base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the endpoint answers while the worker runs
        assert len(listening_sockets() - before) == 1
    assert stream_endpoint(endpoint) is None  # closed when the worker stopped
    assert listening_sockets() == before
    assert store_dir.exists()  # the session's conversation, written by the worker


async def test_what_is_wrong_surfaces_when_a_worker_is_configured(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = KeelPlugin(tool_modules=["tests.no_such_tools"])  # made: nothing looked at yet
    with pytest.raises(ToolModuleError, match="'tests.no_such_tools' not found"):
        Worker(client, task_queue=task_queue, plugins=[missing])
    monkeypatch.setenv("KEEL_JUDGE_TIMEOUT_S", "soon")
    slow = KeelPlugin(tool_modules=[SAMPLE_TOOLS])
    with pytest.raises(ConfigError, match="KEEL_JUDGE_TIMEOUT_S='soon'"):
        Worker(client, task_queue=task_queue, plugins=[slow])
    with pytest.raises(TypeError, match="not one string"):
        KeelPlugin(tool_modules=SAMPLE_TOOLS)
