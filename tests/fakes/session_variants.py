"""Test-only releases of the session workflow, registered as ``AgentSession`` like Keel's.

- ``UnsafeSession``: a release that is **not** replay-safe: a timer before every model call.
  A session whose history was written by Keel's ``AgentSession`` fails to replay on it.
- ``SafeSession``: the same change behind ``workflow.patched``: old histories replay, and a
  session that moves to it takes the new path from its next model call on.

``keel deploy check --workflow tests.fakes.session_variants:UnsafeSession`` replays with one,
as the new release's installation would. Workflow code only: the sandbox imports it.
"""

from __future__ import annotations

from temporalio import workflow

from keel import AgentSession, TurnRecord
from keel.workflows.activity_contracts import ModelResponse
from keel.workflows.contracts import SessionResult
from keel.workflows.ledger import SessionInput
from keel.workflows.raw_inputs import RawInput

PAUSE_PATCH = "keel-test-pause-before-model"
PAUSE_S = 0.01


@workflow.defn(name="AgentSession")
class UnsafeSession(AgentSession):
    """Release B, not replay-safe: a timer before each model call, with no patch."""

    @workflow.run
    async def run(self, input: RawInput[SessionInput | None] = None) -> SessionResult:
        return await super().run(input)

    async def _call_model(self, record: TurnRecord, cycle: int) -> ModelResponse:
        await workflow.sleep(PAUSE_S)
        return await super()._call_model(record, cycle)


@workflow.defn(name="AgentSession")
class SafeSession(AgentSession):
    """Release B, replay-safe: the same timer, behind a patch of each model call.

    A patch id answers the same all run long (temporalio memoizes it), so each model call
    has its own: a call the history already has replays without the timer, and a call made
    after the session moved here takes it.
    """

    @workflow.run
    async def run(self, input: RawInput[SessionInput | None] = None) -> SessionResult:
        return await super().run(input)

    async def _call_model(self, record: TurnRecord, cycle: int) -> ModelResponse:
        if workflow.patched(f"{PAUSE_PATCH}-{record.turn_id}-{cycle}"):
            await workflow.sleep(PAUSE_S)
        return await super()._call_model(record, cycle)
