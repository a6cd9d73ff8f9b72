"""Recorded histories replay against today's workflow code; an incompatible change fails."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

import tests.sample_tools  # noqa: F401 - the policies the recorded sessions used, as on their worker
from keel import AgentSession, KeelClient, TurnRecord
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.sandbox import sandbox_runner
from keel.workflows.activity_contracts import ModelResponse
from keel.workflows.contracts import SessionResult
from keel.workflows.ledger import SessionInput
from keel.workflows.raw_inputs import RawInput
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import HISTORIES, load_history

# tests/histories/*.json: recorded by the current code; tests/histories/<version>/: recorded by
# earlier code, kept so that a change which would break running sessions fails here.
RECORDED = sorted(HISTORIES.rglob("*.json"))


@workflow.defn(name="AgentSession", sandboxed=False)
class ReorderedSession(AgentSession):
    """An incompatible change: a timer before every model call."""

    @workflow.run
    async def run(self, input: RawInput[SessionInput | None] = None) -> SessionResult:
        return await super().run(input)

    async def _call_model(self, record: TurnRecord, cycle: int) -> ModelResponse:
        await workflow.sleep(0.01)
        return await super()._call_model(record, cycle)


def _replayer(workflow_cls: type, namespace: str = "default") -> Replayer:
    return Replayer(
        workflows=[workflow_cls],
        data_converter=DATA_CONVERTER,
        workflow_runner=sandbox_runner(),
        namespace=namespace,
    )


def _load(path: Path) -> WorkflowHistory:
    return load_history(path)[0]


async def _replay(workflow_cls: type, path: Path) -> None:
    """Replay a recorded history as the session id, in the namespace, it ran as."""
    history, namespace = load_history(path)
    await _replayer(workflow_cls, namespace).replay_workflow(history)


def test_histories_are_recorded() -> None:
    assert len(RECORDED) >= 5, "tests/histories lost its recorded histories"


IDS = [str(p.relative_to(HISTORIES).with_suffix("")) for p in RECORDED]


@pytest.mark.parametrize("path", RECORDED, ids=IDS)
async def test_recorded_history_replays(path: Path) -> None:
    await _replay(AgentSession, path)


# The change below adds a timer before each model call: a run that made none (one that
# continued-as-new after its turn and then only waited) cannot show it.
WITH_MODEL_CALLS = [p for p in RECORDED if '"keel.model.converse"' in p.read_text()]


@pytest.mark.parametrize(
    "path",
    WITH_MODEL_CALLS,
    ids=[str(p.relative_to(HISTORIES).with_suffix("")) for p in WITH_MODEL_CALLS],
)
async def test_incompatible_change_fails_replay(path: Path) -> None:
    with pytest.raises(NondeterminismError):
        await _replay(ReorderedSession, path)


async def test_fresh_history_replays_and_catches_a_change(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script(
        [respond(tool_use("t", "echo", text="x"), stop="tool_use"), respond(text("ok"))]
    )
    session = f"replay-{uuid.uuid4().hex[:8]}"
    async with run_worker():
        await keel.run(session, "go", config=config, timeout_s=30)
    history = await keel.client.get_workflow_handle(session).fetch_history()
    await _replayer(AgentSession).replay_workflow(history)
    with pytest.raises(NondeterminismError):
        await _replayer(ReorderedSession).replay_workflow(history)


async def test_other_activity_timeouts_and_retries_still_replay() -> None:
    """Heartbeat timeouts and retry policies are settings, not workflow code.

    A session recorded with other values (here: Keel's before issue 23, a 10 s heartbeat
    timeout and retries from 1 s, eight attempts) replays against today's code, which asks
    for 2.5 s (the session's own) and 0.25 s: temporalio compares an activity's id and type
    on replay, not its options. So changing these defaults never needs a patch.
    """
    text = (HISTORIES / "session_heartbeat_timeout.json").read_text()
    assert '"heartbeatTimeout": "2.500s"' in text and '"initialInterval": "0.250s"' in text
    legacy = (
        text.replace('"heartbeatTimeout": "2.500s"', '"heartbeatTimeout": "10s"')
        .replace('"initialInterval": "0.250s"', '"initialInterval": "1s"')
        .replace('"maximumAttempts": 10', '"maximumAttempts": 8')
    )
    await _replayer(AgentSession).replay_workflow(WorkflowHistory.from_json("legacy", legacy))


async def test_signed_histories_replay_as_their_session_and_namespace_only() -> None:
    """A signed decision is checked again on replay: bound to its session, and since the
    ``keel-signing-v2`` patch to its namespace; a history from before the patch has none."""
    current, namespace = load_history(HISTORIES / "signed_approvals.json")
    assert namespace == "default"
    await _replayer(AgentSession, namespace).replay_workflow(current)
    with pytest.raises(RuntimeError, match="does not verify"):
        await _replayer(AgentSession, "elsewhere").replay_workflow(current)
    before, _ = load_history(HISTORIES / "before-signing-v2" / "signed_approvals.json")
    await _replayer(AgentSession, "elsewhere").replay_workflow(before)
    renamed = WorkflowHistory("another-session", before.events)
    with pytest.raises(RuntimeError, match="does not verify"):
        await _replayer(AgentSession).replay_workflow(renamed)
