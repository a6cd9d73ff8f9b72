"""Where a turn's time goes, stage by stage, on each path of ``tests.benchmarks.real_model``.

``python3 -m tests.benchmarks.real_model --profile N`` then runs, with the worker's steps
timed (wrapped in this process, for the profile only):

- N calls of each path, one at a time (the order rotated each time), each timed from three
  clocks on one machine: the client's (sent; held the answer), the server's (the history's
  event times: workflow started, each workflow task scheduled / started / completed, the
  activity scheduled / started / completed) and the worker's (Keel's store work,
  ``ModelActivities._resolve``; the HTTP call, ``OpenAIProvider.converse`` or the floor's
  and direct path's ``stream_chat``; Keel's first streamed text; heartbeats; turn queries);
- one batch of ``--concurrency`` calls at once per path: how long after the batch began
  the server got its first request (``head``), how long after its last stream ended the
  client held the last answer (``tail``), the time between them (``streams``) and the time
  inside it when no stream was open (``idle``).

Lines are ``profile_ms[path=P,stage=S] median ms``, in the order of a turn:

- ``to_started``: client sends → workflow started (Keel: update-with-start);
- ``wft1_wait`` / ``wft1_run``: first workflow task scheduled → started → completed;
- ``activity_wait``: activity scheduled → started on the worker;
- ``to_http``: activity started → the HTTP request begins (Keel: store work included);
- ``activity_start``: of which, to Keel's activity function running (the task's way to the
  worker, its input decoded, the interceptors); ``prepare``: from there to the HTTP request
  (the provider resolved, two hops to the call's thread, the store's work, the view);
- ``store``: Keel's store reads and writes before the call (part of ``prepare``);
- ``http``: the HTTP call, request body built to last chunk read; ``first_text``: to the
  first text (Keel);
- ``to_completed``: the call's end → activity completed (the result back to the server);
- ``wft2_wait`` / ``wft2_run``: the workflow task that takes the activity's result;
- ``seen``: that workflow task completed → the client holds the result (Keel: the wait for
  the turn);
- ``total``: client sends → client holds the result; ``outside_http``: total - http, per call;
- ``profile_count[path=P,what=heartbeats|turn_queries]``: per turn, medians (a turn query is
  two RPCs: the query and a ``describe``); ``profile_batch_count``: the same, per batch.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import temporalio.activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from keel.activities import model_call
from keel.activities.model_call import ModelActivities
from keel.activities.models.openai import OpenAIProvider
from tests.benchmarks import real_model_floor
from tests.benchmarks.real_model_paths import PATHS, Paths, Prompt, rotated

STAGES = (
    "to_started",
    "wft1_wait",
    "wft1_run",
    "activity_wait",
    "to_http",
    "activity_start",
    "prepare",
    "store",
    "http",
    "first_text",
    "to_completed",
    "wft2_wait",
    "wft2_run",
    "seen",
    "total",
    "outside_http",
)
SPANS = {
    "to_started": ("sent", "started"),
    "wft1_wait": ("wft1_scheduled", "wft1_started"),
    "wft1_run": ("wft1_started", "wft1_completed"),
    "activity_wait": ("activity_scheduled", "activity_started"),
    "to_http": ("activity_started", "http_start"),
    "activity_start": ("activity_started", "entered"),
    "prepare": ("entered", "http_start"),
    "store": ("store_start", "store_end"),
    "http": ("http_start", "http_end"),
    "first_text": ("http_start", "first_text"),
    "to_completed": ("http_end", "activity_completed"),
    "wft2_wait": ("activity_completed", "wft2_started"),
    "wft2_run": ("wft2_started", "wft2_completed"),
    "seen": ("wft2_completed", "held"),
    "total": ("sent", "held"),
}
BATCH_STAGES = ("head", "streams", "idle", "tail", "wall")


@dataclass
class Stamps:
    """Wall-clock times (``time.time()``) of the worker's steps since the last ``clear``.

    Attributes:
        times: the first time of each step.
        streams: each HTTP call's (start, end).
        heartbeats: model activity heartbeats sent.
        queries: turn queries asked.
    """

    times: dict[str, float] = field(default_factory=dict)
    streams: list[tuple[float, float]] = field(default_factory=list)
    heartbeats: int = 0
    queries: int = 0

    def mark(self, name: str) -> None:
        """Record ``name`` now, the first time only."""
        self.times.setdefault(name, time.time())

    def clear(self) -> None:
        """Forget every step."""
        self.times, self.streams, self.heartbeats, self.queries = {}, [], 0, 0


def instrumented(stamps: Stamps, paths: Paths) -> Callable[[], None]:
    """Wrap the worker's steps to mark ``stamps``; the function that unwraps them."""
    resolve = ModelActivities._resolve
    resolve_model = vars(model_call)["resolve_model"]  # the name the activity calls
    converse = OpenAIProvider.converse
    stream_chat = real_model_floor.stream_chat
    heartbeat = temporalio.activity.heartbeat
    turn = paths.keel.turn

    def timed_resolve_model(*args: Any) -> Any:
        stamps.mark("entered")  # the first thing Keel's model activity does
        return resolve_model(*args)

    def timed_resolve(self: ModelActivities, request: Any) -> Any:
        stamps.mark("store_start")
        try:
            return resolve(self, request)
        finally:
            stamps.mark("store_end")

    def timed_converse(self: OpenAIProvider, request: Any, on_delta: Any) -> Any:
        def delta(text: str) -> None:
            if text:
                stamps.mark("first_text")
            on_delta(text)

        return http(lambda: converse(self, request, delta))

    def timed_stream_chat(url: str, body: bytes) -> Any:
        return http(lambda: stream_chat(url, body))

    def http(call: Callable[[], Any]) -> Any:
        start = time.time()
        stamps.mark("http_start")
        try:
            return call()
        finally:
            stamps.mark("http_end")
            stamps.streams.append((start, time.time()))

    def counted_heartbeat(*details: Any) -> None:
        stamps.heartbeats += 1
        heartbeat(*details)

    async def counted_turn(session_id: str, turn_id: int) -> Any:
        stamps.queries += 1
        return await turn(session_id, turn_id)

    ModelActivities._resolve = timed_resolve  # type: ignore[method-assign]
    vars(model_call)["resolve_model"] = timed_resolve_model
    OpenAIProvider.converse = timed_converse  # type: ignore[method-assign]
    real_model_floor.stream_chat = timed_stream_chat
    temporalio.activity.heartbeat = counted_heartbeat
    paths.keel.turn = counted_turn  # type: ignore[method-assign]

    def undo() -> None:
        ModelActivities._resolve = resolve  # type: ignore[method-assign]
        vars(model_call)["resolve_model"] = resolve_model
        OpenAIProvider.converse = converse  # type: ignore[method-assign]
        real_model_floor.stream_chat = stream_chat
        temporalio.activity.heartbeat = heartbeat
        del paths.keel.turn

    return undo


def event_times(history: WorkflowHistory) -> dict[str, float]:
    """The times of the events a turn is timed by (``wft1_*``: the first workflow task,
    ``wft2_*``: the first one after the activity completed)."""
    names = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "started",
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity_scheduled",
        EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "activity_started",
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_completed",
    }
    tasks = {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED: "scheduled",
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "started",
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "completed",
    }
    times: dict[str, float] = {}
    for event in history.events:
        at = event.event_time.ToNanoseconds() / 1e9
        if event.event_type in names:
            times.setdefault(names[event.event_type], at)
        elif event.event_type in tasks:
            task = "wft2" if "activity_completed" in times else "wft1"
            times.setdefault(f"{task}_{tasks[event.event_type]}", at)
    return times


async def one_call(paths: Paths, path: str, prompt: Prompt, stamps: Stamps) -> dict[str, float]:
    """One call on ``path``, alone: its stages, in seconds."""
    name = f"profile-{uuid.uuid4().hex[:8]}"
    stamps.clear()
    times = {"sent": time.time()}
    await paths.call(path, prompt, name)
    times["held"] = time.time()
    if path != "direct":
        client = paths.floor if path == "floor" else paths.keel.client
        times.update(event_times(await client.get_workflow_handle(name).fetch_history()))
    times.update(stamps.times)
    spans = {n: times[b] - times[a] for n, (a, b) in SPANS.items() if a in times and b in times}
    spans["outside_http"] = spans["total"] - spans["http"]
    return spans


async def one_batch(
    paths: Paths, path: str, prompt: Prompt, calls: int, stamps: Stamps
) -> dict[str, float]:
    """``calls`` calls at once on ``path``: head, streams, idle, tail and wall, in seconds;
    heartbeats and turn queries, counted."""
    stamps.clear()
    began = time.time()
    await paths.call_many(path, prompt, calls)
    held = time.time()
    streams = sorted(stamps.streams)
    first, last = streams[0][0], max(end for _, end in streams)
    idle, reached = 0.0, first
    for start, end in streams:
        idle += max(0.0, start - reached)
        reached = max(reached, end)
    return {
        "head": first - began,
        "streams": last - first,
        "idle": idle,
        "tail": held - last,
        "wall": held - began,
        "heartbeats": stamps.heartbeats,
        "turn_queries": stamps.queries,
    }


async def profile(
    paths: Paths,
    prompt: Prompt,
    calls: int,
    out: Callable[[str], None],
    *,
    batch: Prompt,
    concurrency: int,
) -> dict[str, float]:
    """``calls`` profiled calls of each path and one batch each; the medians of the stages."""
    stamps = Stamps()
    undo = instrumented(stamps, paths)
    found: dict[str, dict[str, list[float]]] = {path: {} for path in PATHS}
    counts: dict[str, dict[str, list[int]]] = {path: {} for path in PATHS}
    batches: dict[str, dict[str, float]] = {}
    try:
        for index in range(calls):
            for path in rotated(PATHS, index):
                for stage, seconds in (await one_call(paths, path, prompt, stamps)).items():
                    found[path].setdefault(stage, []).append(seconds)
                counts[path].setdefault("heartbeats", []).append(stamps.heartbeats)
                counts[path].setdefault("turn_queries", []).append(stamps.queries)
        if concurrency:
            for path in PATHS:
                batches[path] = await one_batch(paths, path, batch, concurrency, stamps)
    finally:
        undo()
    out(f"# profile: {calls} calls per path, one at a time; medians per stage")
    figures: dict[str, float] = {}
    for path, spans in found.items():
        for stage in STAGES:
            if stage in spans:
                key = f"profile_ms[path={path},stage={stage}]"
                figures[key] = statistics.median(spans[stage]) * 1000
                out(f"{key} {figures[key]:.1f} ms")
        for what, values in counts[path].items():
            if path.startswith("keel"):
                key = f"profile_count[path={path},what={what}]"
                figures[key] = statistics.median(values)
                out(f"{key} {figures[key]:g} per turn")
    if batches:
        out(f"# profile: one batch of {concurrency} calls at once per path")
    for path, stages in batches.items():
        for stage in BATCH_STAGES:
            key = f"profile_batch_ms[path={path},stage={stage},sessions={concurrency}]"
            figures[key] = stages[stage] * 1000
            out(f"{key} {figures[key]:.0f} ms")
        for what in ("heartbeats", "turn_queries"):
            if path.startswith("keel"):
                key = f"profile_batch_count[path={path},what={what},sessions={concurrency}]"
                figures[key] = stages[what]
                out(f"{key} {figures[key]:g}")
    return figures
