"""The activities a parent session uses to deal with its sub-agents' sessions.

A parent never believes what a signal says about a child (signals carry no sender).
``keel.session.child_report`` asks the child itself, through the worker's Temporal client,
and answers only for a session whose parent, as Temporal recorded it when the child was
started, is the asking run; ``keel.session.forward`` hands a decision or answer given to the
parent to the child as an update, and says whether the child took it.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from keel.workflows.activity_contracts import ChildReportRequest, ForwardRequest, ForwardResponse
from keel.workflows.activity_options import CHILD_REPORT_ACTIVITY, FORWARD_ACTIVITY, NOT_OUR_CHILD
from keel.workflows.contracts import ChildInterrupts, InterruptAck

INTERRUPTS_QUERY = "interrupts"
# RPC answers that mean the child session is gone or closed: retrying will not help.
_GONE = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)


@activity.defn(name=CHILD_REPORT_ACTIVITY)
async def child_report(request: ChildReportRequest) -> ChildInterrupts:
    """The interrupts of a child session, if it is the asking run's own child.

    Raises:
        ApplicationError: (``KeelNotOurChild``, final) no such session, or one that the
            asking run did not start.
    """
    client = activity.client()
    try:
        described = await client.get_workflow_handle(request.child_id).describe()
    except RPCError as err:
        if err.status in _GONE:
            raise _not_ours(request, f"it cannot be found ({err.message})") from None
        raise
    if (described.parent_id, described.parent_run_id) != (
        request.parent_id,
        request.parent_run_id,
    ):
        raise _not_ours(request, f"its parent is {described.parent_id!r}")
    # the run described, not whatever run holds the id by the time the query arrives
    handle = client.get_workflow_handle(request.child_id, run_id=described.run_id)
    report: ChildInterrupts = await handle.query(INTERRUPTS_QUERY, result_type=ChildInterrupts)
    if report.child_id != request.child_id:
        raise _not_ours(request, f"it answers as {report.child_id!r}")
    return report


@activity.defn(name=FORWARD_ACTIVITY)
async def forward(request: ForwardRequest) -> ForwardResponse:
    """Send a decision (``decide``) or an answer (``respond``) to a child session.

    The update's id is this activity's, so a retried attempt is the same update to the
    child, which answers it again without deciding twice.
    """
    info = activity.info()
    handle = activity.client().get_workflow_handle(request.child_id)
    update_id = f"keel-forward/{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
    try:
        if request.decision is not None:
            ack = await handle.execute_update(
                "decide", request.decision, id=update_id, result_type=InterruptAck
            )
        elif request.answer is not None:
            ack = await handle.execute_update(
                "respond", request.answer, id=update_id, result_type=InterruptAck
            )
        else:
            return ForwardResponse(refused="nothing to forward")
    except WorkflowUpdateFailedError as err:
        return ForwardResponse(refused=str(err.cause or err))
    except RPCError as err:
        if err.status in _GONE:
            return ForwardResponse(refused=f"its session is gone ({err.message})")
        raise
    return ForwardResponse(ack=ack)


def _not_ours(request: ChildReportRequest, why: str) -> ApplicationError:
    return ApplicationError(
        f"session {request.child_id!r} is not a sub-agent started by this run of "
        f"{request.parent_id!r}: {why}",
        type=NOT_OUR_CHILD,
        non_retryable=True,
    )
