"""Activity heartbeats on the event loop's timer, and a cancel that need not wait for a beat.

Temporal tells a running activity that its cancel was requested only in the answer to a
heartbeat, and Temporal Cloud bills each heartbeat as an Action. A call that beats seldom (a
long heartbeat timeout) would so learn of a cancel late; ``LoopHeartbeats`` therefore also
asks Temporal every ``CANCEL_CHECK_S`` whether its cancel was requested or its workflow
ended (``DescribeWorkflowExecution``: not an Action, and only read, where a heartbeat writes
the activity's state), and beats at once when so; the answer to that beat cancels the
activity as any other would.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import timedelta

import temporalio.api.common.v1 as common
import temporalio.api.workflowservice.v1 as wsv1
from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState, WorkflowExecutionStatus
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

logger = logging.getLogger(__name__)

# A call that beats less often than this asks this often whether it was cancelled (or its
# workflow ended): a cancel reaches it within about this long, whatever its beats.
CANCEL_CHECK_S = 1.0
# One such question may take this long (the server busy); a late answer is dropped.
_CHECK_TIMEOUT = timedelta(seconds=10)


class LoopHeartbeats:
    """Calls ``beat`` every ``every_s`` seconds on the running loop's timer until stopped.

    The first call comes one interval after the start: the server counts the heartbeat
    timeout from the start, so an activity that ends within the first interval (most do)
    sends none. ``beat`` runs in a copy of the creating context (the activity's, so it may
    call ``activity.heartbeat``) and returns whether to go on. When ``every_s`` is longer than
    ``CANCEL_CHECK_S`` and the activity has a client, a cancel requested (or its workflow
    ended) makes the next beat come at once (see the module's docstring).
    """

    def __init__(self, every_s: float, beat: Callable[[], bool]) -> None:
        """Schedule the first beat; call from the activity."""
        self._every_s = every_s
        self._beat = beat
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._handle: asyncio.TimerHandle = self._loop.call_later(every_s, self._tick)
        self._stopped = False
        self._watch: asyncio.Task[None] | None = None
        self._watch_start: asyncio.TimerHandle | None = None
        if every_s > CANCEL_CHECK_S:
            # most calls end within the first second: they pay this timer, not a task and
            # a request (the timer's callback runs in a copy of the activity's context)
            self._watch_start = self._loop.call_later(CANCEL_CHECK_S, self._start_watch)

    def _start_watch(self) -> None:
        if not self._stopped:
            self._watch = _watch_for_cancel(self)

    def soon(self, delay_s: float) -> None:
        """Beat ``delay_s`` from now, unless the next beat comes sooner anyway; on the loop."""
        when = self._loop.time() + delay_s
        if self._stopped or self._handle.when() <= when:
            return
        self._handle.cancel()
        self._handle = self._loop.call_at(when, self._tick)

    def soon_threadsafe(self, delay_s: float) -> None:
        """``soon``, callable from any thread (on the loop's own, without waking it)."""
        if threading.get_ident() == self._loop_thread:
            self.soon(delay_s)
        else:
            self._loop.call_soon_threadsafe(self.soon, delay_s)

    def _tick(self) -> None:
        if self._stopped:
            return
        if self._beat():
            self._handle = self._loop.call_later(self._every_s, self._tick)

    def stop(self) -> None:
        """No more beats (nor questions)."""
        self._stopped = True
        self._handle.cancel()
        if self._watch_start is not None:
            self._watch_start.cancel()
        if self._watch is not None:
            self._watch.cancel()


def _watch_for_cancel(beats: LoopHeartbeats) -> asyncio.Task[None] | None:
    """Start asking whether the running activity was cancelled; None without a client."""
    try:
        client = activity.client()
    except RuntimeError:  # run outside a worker (ActivityEnvironment): nobody to ask
        return None
    info = activity.info()
    execution = common.WorkflowExecution(
        workflow_id=info.workflow_id or "", run_id=info.workflow_run_id or ""
    )
    if not execution.workflow_id:
        return None  # a standalone activity: no workflow to read
    request = wsv1.DescribeWorkflowExecutionRequest(
        namespace=info.workflow_namespace or client.namespace, execution=execution
    )
    return asyncio.get_running_loop().create_task(
        _ask_until_cancelled(beats, client, request, info.activity_id),
        name=f"keel-cancel-watch-{info.activity_id}",
    )


async def _ask_until_cancelled(
    beats: LoopHeartbeats,
    client: Client,
    request: wsv1.DescribeWorkflowExecutionRequest,
    activity_id: str,
) -> None:
    """Ask now and every ``CANCEL_CHECK_S``; beat now once the activity's cancel is requested.

    Or once its workflow is gone or closed. A failed question is asked again at the next check.
    """
    running = WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
    requested = PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
    failing = False
    while True:
        try:
            described = await client.workflow_service.describe_workflow_execution(
                request, retry=False, timeout=_CHECK_TIMEOUT
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                beats.soon(0)
                return
            if not failing:
                logger.info("cannot ask whether activity %s was cancelled: %s", activity_id, err)
            failing = True
        else:
            failing = False
            if described.workflow_execution_info.status != running or any(
                pending.activity_id == activity_id and pending.state == requested
                for pending in described.pending_activities
            ):
                beats.soon(0)
                return
        await asyncio.sleep(CANCEL_CHECK_S)
