"""A worker interceptor that counts the queries and updates each session answers.

Temporal Cloud bills each query and update: tests of how clients wait count them here.
Replays of a worker without a cache count again, as they cost again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from temporalio import workflow
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

_ASKED: Counter[tuple[str, str]] = Counter()


def asked(session: str) -> Counter[str]:
    """What ``session`` answered so far: ``query NAME`` and ``update NAME`` counts."""
    return Counter({what: n for (sid, what), n in _ASKED.items() if sid == session})


class _Count(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await super().execute_workflow(input)

    def handle_query(self, input: HandleQueryInput) -> Any:
        _ASKED[(workflow.info().workflow_id, f"query {input.query}")] += 1
        return super().handle_query(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        _ASKED[(workflow.info().workflow_id, f"update {input.update}")] += 1
        return await super().handle_update_handler(input)


class CountAsked(Interceptor):
    """Give it to a worker (``run_worker(interceptors=[CountAsked()])``); read ``asked``."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Count
