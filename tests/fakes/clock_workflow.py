"""A workflow that reads the wall clock, which the sandbox forbids: to attack the sandbox."""

from __future__ import annotations

import datetime

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError


@workflow.defn(name="ReadsTheClock", failure_exception_types=[RestrictedWorkflowAccessError])
class ReadsTheClock:
    """Returns ``datetime.now()``; the sandbox must refuse it."""

    @workflow.run
    async def run(self) -> str:
        return datetime.datetime.now().isoformat()
