"""OpenTelemetry tracing for Keel workers (needs the ``otel`` extra).

The span tree of one turn (one trace per turn)::

    keel.turn                                   turn, session, model
      StartActivity:keel.model.converse         temporalio's TracingInterceptor
        RunActivity:keel.model.converse
          keel.model_call                       model, tokens, stop reason, cycle
      StartActivity:keel.tool.run
        RunActivity:keel.tool.run
          keel.tool_run                         tool name, outcome

``keel.turn`` is emitted by the workflow when the turn's first model call starts, as a
zero-length span like temporalio's other workflow spans (workflow code may not hold a span
open across workflow tasks). Its trace and span ids are derived from the session and the
turn, so every worker that carries the turn on, after a crash or continue-as-new, parents
its activities under the same span without any state but the workflow's history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from keel.activities.models import telemetry_name
from keel.worker.process.interceptors import TurnSpan, tool_status
from keel.worker.settings import DEFAULT_SERVICE_NAME
from keel.workflows.activity_options import MODEL_ACTIVITY

__all__ = [
    "KeelSpans",
    "KeelIdGenerator",
    "keel_tracer",
    "otlp_exporter",
    "tracer_provider",
    "turn_span_ids",
]

T = TypeVar("T")
_FORCED_IDS: ContextVar[tuple[int, int] | None] = ContextVar("keel_forced_ids", default=None)
_MAX_ERROR_CHARS = 300


class KeelIdGenerator(IdGenerator):
    """Random ids, except for a turn span, whose ids come from its session and turn."""

    def __init__(self, inner: IdGenerator | None = None) -> None:
        """Wrap ``inner`` (default: random ids)."""
        self.inner = inner or RandomIdGenerator()

    def generate_span_id(self) -> int:
        """The forced span id, else the inner generator's."""
        forced = _FORCED_IDS.get()
        return forced[1] if forced else self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        """The forced trace id, else the inner generator's."""
        forced = _FORCED_IDS.get()
        return forced[0] if forced else self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        """Whether trace ids are random (derived ones are uniformly distributed too)."""
        return self.inner.is_trace_id_random()


def turn_span_ids(session_id: str, first_run_id: str, turn: int) -> tuple[int, int]:
    """The trace id and span id of a turn's span: the same on every worker."""
    digest = hashlib.sha256(f"keel.turn\0{session_id}\0{first_run_id}\0{turn}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def otlp_exporter(traces_url: str) -> SpanExporter:
    """An OTLP/HTTP span exporter posting to ``traces_url`` (``.../v1/traces``).

    Headers, timeouts and compression come from the standard ``OTEL_EXPORTER_OTLP_*``
    variables.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=traces_url)


def tracer_provider(
    *exporters: SpanExporter,
    service_name: str = DEFAULT_SERVICE_NAME,
    batch: bool = True,
) -> TracerProvider:
    """A tracer provider for a worker, exporting to ``exporters``.

    Args:
        *exporters: where spans go (``otlp_exporter(url)``, an in-memory exporter in tests).
        service_name: ``service.name`` of the resource (``OTEL_RESOURCE_ATTRIBUTES`` adds
            more).
        batch: export in batches (a background thread), else as each span ends.
    """
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}), id_generator=KeelIdGenerator()
    )
    for exporter in exporters:
        processor: SpanProcessor = (
            BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        )
        provider.add_span_processor(processor)
    return provider


def keel_tracer(provider: TracerProvider) -> Tracer:
    """Keel's tracer from ``provider``, whose id generator is made able to name turn spans."""
    if not isinstance(provider.id_generator, KeelIdGenerator):
        # a public attribute the provider hands to each tracer it creates
        provider.id_generator = KeelIdGenerator(provider.id_generator)  # type: ignore[assignment]
    return provider.get_tracer("keel")


class KeelSpans:
    """Keel's spans, for ``KeelInterceptor`` (it implements ``ActivitySpans``)."""

    def __init__(self, provider: TracerProvider) -> None:
        """Emit spans with Keel's tracer from ``provider`` (see ``keel_tracer``)."""
        self.tracer = keel_tracer(provider)

    def start_in_turn(self, turn: TurnSpan, start: Callable[[], T]) -> T:
        """Emit the turn's span when the turn starts; start the activity under it.

        The workflow side calls it (an extern function) for each activity of a turn.
        """
        trace_id, span_id = turn_span_ids(turn.session_id, turn.first_run_id, turn.turn)
        if turn.starts_turn and not turn.replaying:
            token = _FORCED_IDS.set((trace_id, span_id))
            try:
                span = self.tracer.start_span(
                    "keel.turn",
                    context=otel_context.Context(),
                    attributes={
                        "keel.session_id": turn.session_id,
                        "keel.turn": turn.turn,
                        "keel.model": turn.model,
                        "temporalWorkflowID": turn.session_id,
                        "temporalRunID": turn.run_id,
                    },
                    start_time=turn.time_ns,
                )
            finally:
                _FORCED_IDS.reset(token)
            span.end(end_time=turn.time_ns)
        parent = trace.SpanContext(
            trace_id,
            span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        with _attached(trace.set_span_in_context(trace.NonRecordingSpan(parent))):
            return start()

    async def run(
        self,
        activity_type: str,
        fields: Mapping[str, Any],
        request: Any,
        next: ActivityInboundInterceptor,
        input: ExecuteActivityInput,
    ) -> Any:
        """Run a model call or tool run inside its ``keel.model_call`` / ``keel.tool_run`` span."""
        attributes: dict[str, Any] = {
            "keel.session_id": fields["session_id"],
            "keel.attempt": fields["attempt"],
        }
        for key in ("turn", "cycle"):
            if fields.get(key) is not None:
                attributes[f"keel.{key}"] = fields[key]
        if activity_type == MODEL_ACTIVITY:
            return await _model_call(self.tracer, attributes, request, next, input)
        return await _tool_run(self.tracer, attributes, request, next, input)


@contextmanager
def _attached(ctx: otel_context.Context) -> Iterator[None]:
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


async def _model_call(
    tracer: Tracer,
    attributes: dict[str, Any],
    request: Any,
    next: ActivityInboundInterceptor,
    input: ExecuteActivityInput,
) -> Any:
    spec = str(getattr(request, "model", ""))
    rest = spec.partition(":")[2]
    attributes.update(
        {
            "keel.model": spec,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": telemetry_name(spec),
            "gen_ai.request.model": rest.split("?", 1)[0] or spec,
        }
    )
    with tracer.start_as_current_span(
        "keel.model_call", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        response = await next.execute_activity(input)
        usage = getattr(response, "usage", None)
        if usage is None:
            return response
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.inputTokens,
                "gen_ai.usage.output_tokens": usage.outputTokens,
                "gen_ai.response.finish_reasons": [response.stopReason],
                "keel.stop_reason": response.stopReason,
            }
        )
        return response


async def _tool_run(
    tracer: Tracer,
    attributes: dict[str, Any],
    request: Any,
    next: ActivityInboundInterceptor,
    input: ExecuteActivityInput,
) -> Any:
    use = getattr(request, "tool_use", None)
    name = str(getattr(use, "name", ""))
    attributes.update(
        {
            "keel.tool.name": name,
            "keel.tool.use_id": str(getattr(use, "toolUseId", "")),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(getattr(use, "toolUseId", "")),
        }
    )
    with tracer.start_as_current_span(
        "keel.tool_run", kind=SpanKind.INTERNAL, attributes=attributes
    ) as span:
        try:
            response = await next.execute_activity(input)
        except BaseException:
            span.set_attribute("keel.tool.status", "not_finished")
            raise
        status = tool_status(response)
        span.set_attribute("keel.tool.status", status)
        question = getattr(response, "question", None)
        if question is not None:
            span.set_attribute("keel.tool.question", str(getattr(question, "name", "")))
        if status == "error":
            content = response.result.content
            text = " ".join(c.text for c in content if getattr(c, "text", None))
            span.set_status(Status(StatusCode.ERROR, text[:_MAX_ERROR_CHARS]))
        return response
