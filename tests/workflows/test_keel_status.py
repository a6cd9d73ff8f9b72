"""What Temporal's own UI and CLI show of a session: ``KeelStatus`` and activity summaries.

The tests' dev server has ``KeelStatus``, as ``keel dev`` does; a server without it is in
tests/worker/test_keel_status_server.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, ScheduleActionStartWorkflow, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from keel import AgentSession, KeelClient, SessionConfig, SubAgent
from keel.worker.client.schedules import KeelSchedules
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.sandbox import sandbox_runner
from keel.workflows.contracts import Interrupt
from keel.workflows.judging import judge_summary
from keel.workflows.ledger import SessionInput
from keel.workflows.messages import ToolUse, text_block
from keel.workflows.status_attribute import KEEL_STATUS, model_label, short
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import (
    HISTORIES,
    load_history,
    run_histories,
    save_history,
    temporal_cli,
)


def sid() -> str:
    return f"ks-{uuid.uuid4().hex[:10]}"


async def listed(client: Client, query: str) -> set[str]:
    return {w.id async for w in client.list_workflows(query)}


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 15) -> None:
    """Poll ``check`` (visibility is eventually consistent) until it holds."""
    for _ in range(int(timeout_s / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


async def until_status(client: Client, session: str, status: str) -> None:
    query = f'WorkflowId="{session}" AND KeelStatus="{status}"'

    async def check() -> bool:
        return await listed(client, query) == {session}

    await until(check, f"{session} listed with KeelStatus={status}")


async def status_of(client: Client, session: str) -> str | None:
    described = await client.get_workflow_handle(session).describe()
    return described.typed_search_attributes.get(KEEL_STATUS)


async def cli_listed(env: WorkflowEnvironment, query: str) -> set[str]:
    """The workflow ids the raw ``temporal workflow list --query`` prints."""
    raw = await temporal_cli(env, "workflow", "list", "--query", query, "-o", "json")
    assert raw.returncode == 0, raw.stderr
    text = raw.stdout.strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    return {row["execution"]["workflowId"] for row in rows}


def upserted(history: WorkflowHistory) -> list[str]:
    """The KeelStatus values a run upserted, in order."""
    values = []
    for event in history.events:
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            payload = fields.indexed_fields.get(KEEL_STATUS.name)
            if payload is not None:
                values.append(json.loads(payload.data))
    return values


def summaries(history: WorkflowHistory) -> list[str]:
    """The summaries of the activities a run scheduled, in order."""
    return [
        _summary(event)
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]


def _summary(event: HistoryEvent) -> str:
    if not event.user_metadata.HasField("summary"):
        return ""
    value = DATA_CONVERTER.payload_converter.from_payload(event.user_metadata.summary, str)
    assert isinstance(value, str)
    return value


async def test_a_parked_session_is_listed_as_waiting_then_idle(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
) -> None:
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("s1", "slow", seconds=1.5, label="slept"), stop="tool_use"),
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ]
    )
    session = sid()
    client = keel.client
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        await until_status(client, session, "running")  # while the slow tool runs
        waiting = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        assert waiting.status == "awaiting_human"
        await until_status(client, session, "waiting")
        assert session in await listed(client, 'KeelStatus="waiting"')
        assert session not in await listed(client, 'KeelStatus="running"')
        # the raw CLI, as an operator lists who waits for a person
        assert session in await cli_listed(temporal_env, 'KeelStatus="waiting"')
        assert session not in await cli_listed(temporal_env, 'KeelStatus="idle"')
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        assert done.status == "completed"
        await until_status(client, session, "idle")
        assert session not in await listed(client, 'KeelStatus="waiting"')
        assert session not in await cli_listed(temporal_env, 'KeelStatus="waiting"')
        assert session in await cli_listed(temporal_env, 'KeelStatus="idle"')
        await keel.close(session)
        await client.get_workflow_handle(session).result()
    await save_history(client, session, "keel_status")
    history = await client.get_workflow_handle(session).fetch_history()
    # started running; one upsert per change, none repeated
    started = history.events[0].workflow_execution_started_event_attributes
    assert json.loads(started.search_attributes.indexed_fields[KEEL_STATUS.name].data) == (
        "running"
    )
    assert upserted(history) == ["waiting", "running", "idle"]
    assert await status_of(client, session) == "idle"
    # Temporal's UI names what each activity ran: the model (no folder) and the tools
    model = "model scripted:" + Path(config.model.partition(":")[2]).name
    assert summaries(history) == [model, "tool slow", model, "tool guarded_record", model]


async def test_a_parked_session_keeps_its_status_across_continue_as_new(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    config = script(
        [
            respond(tool_use("e1", "echo", text="warm up"), stop="tool_use"),
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "x"), value="v"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        # past the first cycle and the client's wait_turn update, so that the run continues
        # as new while parked
        continue_as_new_events=24,
    )
    session = sid()
    client = keel.client
    async with run_worker():
        waiting = await keel.run(session, "go", config=config, timeout_s=30)
        assert waiting.status == "awaiting_human"
        for _ in range(100):  # the parked session moves to a new run while it waits
            if (await keel.state(session, include_messages=False)).run > 1:
                break
            await asyncio.sleep(0.1)
        assert (await keel.state(session, include_messages=False)).run > 1
        assert await status_of(client, session) == "waiting"  # the new run kept it
        await until_status(client, session, "waiting")
        await keel.decide(session, waiting.interrupts[0].id, "approve")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        assert done.status == "completed", done.error
        await until_status(client, session, "idle")
        # a run that just began (the idle session continued as new) has its first task run
        # by this worker: wait for it here, not once the worker is gone
        runs = await run_histories(client, session)
        for _ in range(300):
            if all(upserted(run) for run in runs[1:]):
                break
            await asyncio.sleep(0.1)
            runs = await run_histories(client, session)
    await save_history(client, session, "keel_status_across_continue_as_new")
    assert len(runs) > 1
    # the first run upserted waiting; each next one said the status it started with once,
    # in its first task (which would have no command else), and moved on. Where the later
    # runs begin depends on how the server batched events, so only their order is checked.
    shown = [upserted(run) for run in runs]
    assert shown[0] == ["waiting"], shown
    assert shown[1][0] == "waiting", shown
    for before, after in zip(shown, shown[1:], strict=False):
        assert after[0] == before[-1], shown  # a continued run starts with the status it had
    said = [status for run in shown for status in run]
    once = [s for i, s in enumerate(said) if i == 0 or said[i - 1] != s]
    assert once == ["waiting", "running", "idle"], shown


async def test_a_sub_agent_and_its_parent_both_wait_for_the_person(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    child_config = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "x"), value="v"),
                stop="tool_use",
            ),
            respond(text("child done")),
        ]
    )
    config = script(
        [respond(tool_use("c1", "helper", prompt="do it"), stop="tool_use"), respond(text("done"))],
        agents={"helper": SubAgent(description="Helps.", config=child_config)},
    )
    session = sid()
    child = f"{session}/helper-c1"
    client = keel.client
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        await until_status(client, child, "waiting")
        await until_status(client, session, "waiting")  # it shows the child's interrupt
        [interrupt] = (await keel.pending(session)).interrupts
        await keel.decide(session, interrupt.id, "approve")  # decided on the parent
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        assert done.status == "completed", done.error
        await until_status(client, session, "idle")
        await until_status(client, child, "idle")
    history = await client.get_workflow_handle(child).fetch_history()
    assert upserted(history) == ["waiting", "running", "idle"]
    assert "tool guarded_record" in summaries(history)
    parent = await client.get_workflow_handle(session).fetch_history()
    assert upserted(parent)[:2] == ["waiting", "running"]
    started = [
        e
        for e in parent.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert [_summary(e) for e in started] == ["sub-agent helper"]
    calls = summaries(parent)
    assert "ask sub-agent helper" in calls
    assert "forward approval guarded_record to sub-agent helper" in calls


async def test_a_raw_start_without_the_attribute_keeps_no_status(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [respond(tool_use("e1", "echo", text="x"), stop="tool_use"), respond(text("ok"))]
    )
    session = sid()
    client = keel.client
    async with run_worker():
        handle = await client.start_workflow(
            AgentSession.run,
            SessionInput(config=config, prompt=[text_block("go")], single_turn=True),
            id=session,
            task_queue=keel.task_queue,
        )
        result = await handle.result()
    assert result.last_turn is not None and result.last_turn.status == "completed"
    assert await status_of(client, session) is None
    assert upserted(await handle.fetch_history()) == []


async def test_a_raw_cli_start_that_carries_the_attribute_keeps_it_current(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
) -> None:
    config = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "x"), value="v"),
                stop="tool_use",
            ),
            respond(text("done")),
        ]
    )
    start = {"config": config.model_dump(mode="json"), "prompt": "from the shell"}
    session = sid()
    async with run_worker():
        started = await temporal_cli(
            temporal_env,
            "workflow", "start", "--type", "AgentSession", "--task-queue", keel.task_queue,
            "--workflow-id", session, "--input", json.dumps(start),
            "--search-attribute", 'KeelStatus="running"',
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        await until_status(keel.client, session, "waiting")
        [interrupt] = (await keel.pending(session)).interrupts
        await keel.decide(session, interrupt.id, "deny", reason="not today")
        await until_status(keel.client, session, "idle")


async def test_a_schedule_starts_its_sessions_with_the_status(
    keel: KeelClient, script: Script
) -> None:
    name = sid()
    schedules = KeelSchedules(keel.client, keel.task_queue)
    handle = await schedules.create(name, "go", config=script([]), every=timedelta(hours=24))
    try:
        action = (await handle.describe()).schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert action.typed_search_attributes.get(KEEL_STATUS) == "running"
    finally:
        await handle.delete()


def test_model_labels_keep_no_options_and_no_folders() -> None:
    assert model_label("bedrock:anthropic.claude-v2?region=us-east-1&stream=false") == (
        "bedrock:anthropic.claude-v2"
    )
    assert model_label("openai:llama3.1?context_tokens=4096#x") == "openai:llama3.1"
    assert model_label("scripted:/home/me/secret-project/approval.json") == (
        "scripted:approval.json"
    )
    assert model_label(
        "bedrock:arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.x"
    ) == ("bedrock:us.anthropic.x")
    assert len(short("tool " + "x" * 500)) == 120


async def _replay(history: WorkflowHistory) -> None:
    replayer = Replayer(
        workflows=[AgentSession], data_converter=DATA_CONVERTER, workflow_runner=sandbox_runner()
    )
    await replayer.replay_workflow(history)


RECORDED = HISTORIES / "keel_status.json"


@pytest.mark.skipif(not RECORDED.exists(), reason="record it: KEEL_RECORD_HISTORIES=1")
async def test_summaries_are_not_replayed_but_the_status_upserts_are() -> None:
    """User metadata (summaries) is no command's content on replay: histories recorded
    before the summaries replay. The upserts are commands: a start without ``KeelStatus``
    replayed against a history that upserted it fails, so the start is what gates them."""
    recorded = json.loads(RECORDED.read_text())
    history, _ = load_history(RECORDED)
    await _replay(history)
    for event in recorded["events"]:
        event.pop("userMetadata", None)
    await _replay(WorkflowHistory.from_json(history.workflow_id, recorded))
    started = recorded["events"][0]["workflowExecutionStartedEventAttributes"]
    started.pop("searchAttributes")
    with pytest.raises(NondeterminismError):
        await _replay(WorkflowHistory.from_json(history.workflow_id, recorded))


def test_a_judge_summary_names_the_tool_and_the_judge() -> None:
    use = ToolUse(toolUseId="t1", name="write_file", input={})
    interrupt = Interrupt(id="i1", tool_use=use, name="write_file", reason="r", turn=1)
    model = SessionConfig(model="scripted:x.json", judge_model="bedrock:m-1?region=eu-west-1")
    assert judge_summary(model, interrupt) == "judge write_file by bedrock:m-1"
    function = SessionConfig(model="scripted:x.json", judge="tests.judges:careful")
    assert judge_summary(function, interrupt) == "judge write_file by tests.judges:careful"
    assert judge_summary(SessionConfig(model="scripted:x.json"), interrupt) == ("judge write_file")
