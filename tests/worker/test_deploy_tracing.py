"""What a worker tells about itself: the span tree of a turn, and log records with context.

Spans come from an in-memory exporter: one trace per turn, ``keel.turn`` ->
``StartActivity`` -> ``RunActivity`` -> ``keel.model_call`` / ``keel.tool_run``, with model
id, tokens, tool name and outcome as attributes. Every workflow task replays
(``max_cached_workflows=0``), so spans must not repeat on replay.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from keel import ConversationStore, KeelClient, SessionConfig
from keel.worker.process.assembly import build_worker
from keel.worker.process.telemetry import ContextFilter, JsonFormatter, TextFormatter
from keel.worker.process.tracing import tracer_provider, turn_span_ids
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use


def ancestry(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    """Span names from ``span`` up to its root."""
    names = [span.name]
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(ContextFilter())
        self.lines: list[str] = []
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(JsonFormatter().format(record))
        self.text.append(TextFormatter().format(record))


@pytest.fixture
def captured_logs() -> Iterator[Captured]:
    handler = Captured()
    loggers = [logging.getLogger(n) for n in ("temporalio.activity", "temporalio.workflow")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


async def test_span_tree_of_turns_model_calls_and_tool_runs(
    client: Client,
    task_queue: str,
    store: ConversationStore,
    keel: KeelClient,
    script: Callable[..., SessionConfig],
    captured_logs: Captured,
) -> None:
    exporter = InMemorySpanExporter()
    config = script(
        [
            respond(
                tool_use("t1", "echo", text="hi"),
                tool_use("t2", "boom", message="broken on purpose"),
                stop="tool_use",
                tokens=11,
            ),
            respond(text("done"), tokens=7),
            respond(text("cut"), stop="max_tokens", tokens=5),
        ]
    )
    session = f"traced-{uuid.uuid4().hex[:8]}"
    worker = build_worker(
        client,
        task_queue,
        [SAMPLE_TOOLS],
        store=store,
        tracer_provider=tracer_provider(exporter, batch=False),
        max_cached_workflows=0,
    )
    async with worker:
        first = await keel.run(session, "two cycles", config=config)
        second = await keel.run(session, "one cycle")
    assert (first.status, second.status) == ("completed", "failed")

    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    turns = {s.attributes["keel.turn"]: s for s in spans if s.name == "keel.turn"}
    assert sorted(turns) == [1, 2]
    # one span per turn, not repeated on replay; a workflow task that runs again for real
    # (the server refused its completion) emits it again, under the same ids
    ids = {(s.attributes["keel.turn"], s.context.span_id) for s in spans if s.name == "keel.turn"}
    assert len(ids) == 2
    first_run = (await client.get_workflow_handle(session).describe()).run_id
    for number, turn in turns.items():
        assert turn.parent is None  # each turn is the root of its own trace
        assert turn.attributes["keel.session_id"] == session
        assert turn.attributes["keel.model"] == config.model
        # ids derived from the session and turn: any worker parents under the same span
        assert (turn.context.trace_id, turn.context.span_id) == turn_span_ids(
            session, first_run, number
        )

    calls = sorted(
        (s for s in spans if s.name == "keel.model_call"),
        key=lambda s: (s.attributes["keel.turn"], s.attributes["keel.cycle"]),
    )
    assert [(c.attributes["keel.turn"], c.attributes["keel.cycle"]) for c in calls] == [
        (1, 1),
        (1, 2),
        (2, 1),
    ]
    for call, tokens, stop in zip(
        calls, (11, 7, 5), ("tool_use", "end_turn", "max_tokens"), strict=True
    ):
        attrs = call.attributes
        assert attrs["gen_ai.request.model"] == config.model.removeprefix("scripted:")
        assert attrs["gen_ai.provider.name"] == "keel.scripted"
        assert attrs["gen_ai.usage.input_tokens"] == tokens
        assert attrs["gen_ai.usage.output_tokens"] == tokens
        assert attrs["gen_ai.response.finish_reasons"] == (stop,)
        assert attrs["keel.session_id"] == session
        assert ancestry(call, by_id) == [
            "keel.model_call",
            "RunActivity:keel.model.converse",
            "StartActivity:keel.model.converse",
            "keel.turn",
        ]
        assert call.context.trace_id == turns[attrs["keel.turn"]].context.trace_id

    tools = {s.attributes["keel.tool.name"]: s for s in spans if s.name == "keel.tool_run"}
    assert sorted(tools) == ["boom", "echo"]
    assert tools["echo"].attributes["keel.tool.status"] == "success"
    assert tools["boom"].attributes["keel.tool.status"] == "error"
    assert tools["boom"].status.status_code.name == "ERROR"
    assert "broken on purpose" in (tools["boom"].status.description or "")
    for tool in tools.values():
        assert (tool.attributes["keel.turn"], tool.attributes["keel.cycle"]) == (1, 1)
        assert ancestry(tool, by_id) == [
            "keel.tool_run",
            "RunActivity:keel.tool.run",
            "StartActivity:keel.tool.run",
            "keel.turn",
        ]
        assert tool.context.trace_id == turns[1].context.trace_id

    # log records carry session, turn and cycle: from activities (the model call, the
    # failing tool) and from the workflow (the failed turn)
    records = [json.loads(line) for line in captured_logs.lines]
    mine = [r for r in records if r.get("session_id") == session]
    answered = [r for r in mine if r["message"].startswith("model ")]
    assert {(r["turn"], r["cycle"]) for r in answered} >= {(1, 1), (1, 2), (2, 1)}
    failed_tool = next(r for r in mine if "tool 'boom' failed" in r["message"])
    assert (failed_tool["turn"], failed_tool["cycle"], failed_tool["activity"]) == (
        1,
        1,
        "keel.tool.run",
    )
    turn_end = next(r for r in mine if r["message"].startswith("turn 2 ended failed"))
    assert (turn_end["turn"], turn_end["cycle"], turn_end["logger"]) == (
        2,
        1,
        "temporalio.workflow",
    )
    assert any(f"[session={session} turn=1 cycle=1]" in line for line in captured_logs.text)


async def test_a_turn_across_continue_as_new_stays_one_span(
    client: Client,
    task_queue: str,
    store: ConversationStore,
    keel: KeelClient,
    script: Callable[..., SessionConfig],
) -> None:
    exporter = InMemorySpanExporter()
    cycles = 8
    config = script(
        [respond(tool_use(f"t{i}", "echo", text=str(i)), stop="tool_use") for i in range(cycles)]
        + [respond(text("long turn done"))],
        continue_as_new_events=20,
    )
    session = f"traced-can-{uuid.uuid4().hex[:8]}"
    worker = build_worker(
        client,
        task_queue,
        [SAMPLE_TOOLS],
        store=store,
        tracer_provider=tracer_provider(exporter, batch=False),
        max_cached_workflows=0,
    )
    async with worker:
        record = await keel.run(session, "loop", config=config)
        state = await keel.state(session)
    assert record.status == "completed" and state.run > 1, "the turn should span runs"

    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    turn_ids = {s.context.span_id for s in spans if s.name == "keel.turn"}
    assert len(turn_ids) == 1
    (turn_id,) = turn_ids
    work = [s for s in spans if s.name in ("keel.model_call", "keel.tool_run")]
    assert len(work) == 2 * cycles + 1
    runs = set()
    for span in work:
        run_activity = by_id[span.parent.span_id]
        runs.add(run_activity.attributes["temporalRunID"])
        start = by_id[run_activity.parent.span_id]
        assert start.parent is not None and start.parent.span_id == turn_id
        assert span.attributes["keel.turn"] == 1
    assert len(runs) > 1  # spans of several runs, all under the one turn span
