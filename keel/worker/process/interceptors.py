"""Keel's worker interceptor: which session, turn and cycle each activity belongs to.

On the workflow side, every activity the session starts other than a model call carries a
``keel-cycle`` header with the turn and cycle of the latest model call (tool runs follow the
model call of their cycle; a model request names its own). On the activity side, that header
(or the model request itself) says which turn and cycle the activity serves; log records
written while it runs get ``session_id``, ``turn`` and ``cycle`` (see
``keel.worker.process.telemetry``), and SDK metrics count model calls, tokens and tool runs.

Given ``ActivitySpans`` (``keel.worker.process.tracing.KeelSpans``, from the ``otel`` extra),
it also traces: a ``keel.turn`` span per
turn, parent of the ``StartActivity`` spans of temporalio's ``TracingInterceptor`` for the
turn's model calls and tool runs, and under their ``RunActivity`` spans a
``keel.model_call`` span (model, tokens, stop reason) or a ``keel.tool_run`` span (tool,
outcome).

The workflow side runs inside the workflow sandbox and stays deterministic: it reads only
its activities' inputs, and reaches the process (span export, the log context table)
through extern functions, as temporalio's own tracing interceptor does.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import MetricCounter, MetricMeter
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from keel.workflows.activity_options import MODEL_ACTIVITY, TOOL_ACTIVITY

__all__ = [
    "CYCLE_HEADER",
    "ActivitySpans",
    "KeelInterceptor",
    "TurnSpan",
    "log_fields",
    "tool_status",
]
T = TypeVar("T")

CYCLE_HEADER = "keel-cycle"
_JSON_ENCODING = b"json/plain"
_EXTERN_CYCLE = "__keel_note_cycle"
_EXTERN_TRACE = "__keel_trace_activity"
_REMEMBERED_RUNS = 10_000
_logger = logging.getLogger(__name__)

# Fields of the activity running in this context, for log records.
_ACTIVITY_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("keel_activity", default=None)
# The turn and cycle of the latest model call of each workflow run this process executes.
_RUN_CYCLES: OrderedDict[str, tuple[int, int]] = OrderedDict()
_RUN_CYCLES_LOCK = threading.Lock()


@dataclass(frozen=True)
class TurnSpan:
    """What the workflow side tells the process about an activity it starts in a turn.

    Attributes:
        session_id: the workflow id.
        run_id: this run's id.
        first_run_id: the first run's id (stable across continue-as-new): with the session
            and the turn, it names the turn's span, on any worker.
        turn: the turn id.
        cycle: the cycle of the latest model call.
        model: the session's model spec.
        time_ns: workflow time now (the turn span's time when it starts the turn).
        starts_turn: whether this is the turn's first model call.
        replaying: whether the workflow is replaying history (no span is emitted then).
    """

    session_id: str
    run_id: str
    first_run_id: str
    turn: int
    cycle: int
    model: str
    time_ns: int
    starts_turn: bool
    replaying: bool


class ActivitySpans(Protocol):
    """How ``KeelInterceptor`` traces; ``keel.worker.process.tracing.KeelSpans`` implements it.

    Handed in rather than imported, so this module needs no OpenTelemetry.
    """

    def start_in_turn(self, turn: TurnSpan, start: Callable[[], T]) -> T:
        """Start an activity of a turn (``start()``) under the turn's span."""

    async def run(
        self,
        activity_type: str,
        fields: Mapping[str, Any],
        request: Any,
        next: ActivityInboundInterceptor,
        input: ExecuteActivityInput,
    ) -> Any:
        """Run a model call or tool run inside its span."""


def log_fields(record_workflow: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Session, turn and cycle for a log record written now.

    Args:
        record_workflow: the record's ``temporal_workflow`` extra, when a workflow wrote it.

    Returns:
        ``session_id``, ``turn``, ``cycle`` (and ``activity``, ``attempt`` inside an
        activity); empty outside activities and sessions.
    """
    fields = _ACTIVITY_FIELDS.get()
    if fields is not None:
        return dict(fields)
    if not record_workflow:
        return {}
    out: dict[str, Any] = {"session_id": record_workflow.get("workflow_id")}
    with _RUN_CYCLES_LOCK:
        known = _RUN_CYCLES.get(str(record_workflow.get("run_id")))
    if known is not None:
        out["turn"], out["cycle"] = known
    return out


def _note_cycle(run_id: str, turn: int, cycle: int) -> None:
    with _RUN_CYCLES_LOCK:
        _RUN_CYCLES[run_id] = (turn, cycle)
        _RUN_CYCLES.move_to_end(run_id)
        while len(_RUN_CYCLES) > _REMEMBERED_RUNS:
            _RUN_CYCLES.popitem(last=False)


class KeelInterceptor(Interceptor):
    """Worker interceptor: turn and cycle on every activity, logs, metrics, Keel's spans.

    Put it after temporalio's ``TracingInterceptor`` in the worker's interceptors, so its
    spans nest inside that interceptor's (``keel.worker.process.assembly.build_worker`` does).
    """

    def __init__(self, spans: ActivitySpans | None = None) -> None:
        """Trace with ``spans`` when given."""
        self.spans = spans

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Log context, metrics and spans around each activity."""
        return _ActivityInbound(next, self.spans)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        """The workflow side: turn and cycle headers, turn spans through extern functions."""
        input.unsafe_extern_functions[_EXTERN_CYCLE] = _note_cycle
        if self.spans is not None:
            input.unsafe_extern_functions[_EXTERN_TRACE] = self.spans.start_in_turn
        return _WorkflowInbound


class _WorkflowInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self._outbound = _WorkflowOutbound(outbound)
        super().init(self._outbound)

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        # a run continued mid-turn resumes that turn's tools before any model call
        session: Any = input.args[0] if input.args else None
        carried = getattr(session, "carried", None)
        turn = getattr(carried, "current_turn", None)
        if isinstance(turn, int):
            cycle = getattr(getattr(carried, "cycle", None), "cycle", None)
            model = getattr(getattr(session, "config", None), "model", "")
            self._outbound.resume(turn, cycle if isinstance(cycle, int) else 0, str(model))
        return await super().execute_workflow(input)


class _WorkflowOutbound(WorkflowOutboundInterceptor):
    """Deterministic: state comes only from the inputs of the activities started."""

    def __init__(self, next: WorkflowOutboundInterceptor) -> None:
        super().__init__(next)
        self._turn: int | None = None
        self._cycle = 0
        self._model = ""

    def resume(self, turn: int, cycle: int, model: str) -> None:
        """Carry on a turn that the previous run started."""
        self._turn, self._cycle, self._model = turn, cycle, model

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        request: Any = input.args[0] if input.args else None
        starts_turn = False
        if input.activity == MODEL_ACTIVITY and isinstance(getattr(request, "turn", None), int):
            self._turn, self._cycle = request.turn, int(request.cycle)
            self._model = str(getattr(request, "model", ""))
            starts_turn = self._cycle == 1
        if self._turn is None:
            return self.next.start_activity(input)
        externs = workflow.extern_functions()
        info = workflow.info()
        externs[_EXTERN_CYCLE](info.run_id, self._turn, self._cycle)
        if input.activity != MODEL_ACTIVITY:  # a model request names its turn and cycle
            input.headers = {**input.headers, CYCLE_HEADER: _cycle_payload(self._turn, self._cycle)}
        trace = externs.get(_EXTERN_TRACE)
        if trace is None:
            return self.next.start_activity(input)
        span = TurnSpan(
            session_id=info.workflow_id,
            run_id=info.run_id,
            first_run_id=info.first_execution_run_id,
            turn=self._turn,
            cycle=self._cycle,
            model=self._model,
            time_ns=workflow.time_ns(),
            starts_turn=starts_turn,
            replaying=workflow.unsafe.is_replaying(),
        )
        handle: workflow.ActivityHandle[Any] = trace(span, lambda: self.next.start_activity(input))
        return handle


class _ActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, spans: ActivitySpans | None) -> None:
        super().__init__(next)
        self._spans = spans

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        fields: dict[str, Any] = {
            "session_id": info.workflow_id,
            "activity": info.activity_type,
            "attempt": info.attempt,
        }
        fields.update(_cycle_from_header(input.headers))
        request = input.args[0] if input.args else None
        if info.activity_type == MODEL_ACTIVITY:
            fields["turn"] = getattr(request, "turn", fields.get("turn"))
            fields["cycle"] = getattr(request, "cycle", fields.get("cycle"))
        token = _ACTIVITY_FIELDS.set(fields)
        try:
            if self._spans is not None and info.activity_type in (MODEL_ACTIVITY, TOOL_ACTIVITY):
                result = await self._spans.run(
                    info.activity_type, fields, request, self.next, input
                )
            else:
                result = await self.next.execute_activity(input)
        finally:
            _ACTIVITY_FIELDS.reset(token)
        try:
            _count(info.activity_type, request, result)
        except Exception:  # noqa: BLE001 - metrics must never fail an activity
            _logger.debug("could not count %s", info.activity_type, exc_info=True)
        return result


def _cycle_payload(turn: int, cycle: int) -> Payload:
    """The cycle header, as temporalio's default converter would make it, built directly.

    Once per activity start: the converter's lookups cost more than the header itself.
    """
    return Payload(
        metadata={"encoding": _JSON_ENCODING},
        data=b'{"cycle":%d,"turn":%d}' % (cycle, turn),
    )


def _cycle_from_header(headers: Mapping[str, Payload]) -> dict[str, int]:
    payload = headers.get(CYCLE_HEADER)
    if payload is None or payload.metadata.get("encoding") != _JSON_ENCODING:
        return {}
    try:
        value = json.loads(payload.data)
        return {"turn": int(value["turn"]), "cycle": int(value["cycle"])}
    except (KeyError, TypeError, ValueError):
        return {}


_COUNTERS: dict[tuple[int, str], MetricCounter] = {}


def _counter(meter: MetricMeter, name: str, description: str, unit: str) -> MetricCounter:
    key = (id(meter), name)
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = meter.create_counter(name, description, unit)
    return counter


def _count(activity_type: str, request: Any, result: Any) -> None:
    """Keel's metrics, on the same endpoint as the SDK's (``KEEL_METRICS_PORT``)."""
    meter = activity.metric_meter()
    if activity_type == MODEL_ACTIVITY and hasattr(result, "usage"):
        labels = {"model": str(getattr(request, "model", "")), "stop_reason": result.stopReason}
        _counter(meter, "keel_model_calls", "Model calls that returned", "calls").add(1, labels)
        tokens = _counter(meter, "keel_model_tokens", "Tokens of model calls", "tokens")
        tokens.add(result.usage.inputTokens, {"model": labels["model"], "kind": "input"})
        tokens.add(result.usage.outputTokens, {"model": labels["model"], "kind": "output"})
    elif activity_type == TOOL_ACTIVITY and hasattr(result, "result"):
        labels = {"tool": request.tool_use.name, "status": tool_status(result)}
        _counter(meter, "keel_tool_runs", "Tool runs that returned", "runs").add(1, labels)


def tool_status(response: Any) -> str:
    """``success`` or ``error`` (the toolResult's status), or ``question`` (a tool asked)."""
    result = getattr(response, "result", None)
    if result is None:
        return "question" if getattr(response, "question", None) is not None else "unknown"
    return str(result.status)
