"""Load: N concurrent sessions running tool cycles on one worker; nothing may be lost.

Each session runs turns of C tool cycles (the scripted model asks for ``echo`` and ``add``,
then answers). While they run, a sampler reads random sessions' state and checks that the
conversation never holds a toolUse without its toolResult (S5). At the end every session's
conversation is compared with what its script must have produced. Figures, one
``figure value unit`` per line:

- ``load_turns_completed`` / ``load_turns_failed``;
- ``load_messages_lost`` (expected messages missing), ``load_messages_duplicated``,
  ``load_dangling_seen`` (all must be 0);
- ``load_turn_latency_p50_s`` / ``_p99_s`` / ``_max_s``: from the turn's ``prompt_queued``
  event to its ``turn_ended`` event (workflow time, so polling does not blur it);
- ``load_wall_s`` and ``load_turns_per_s``.

Usage::

    python -m tests.benchmarks.load --sessions 50 --cycles 3
    python -m tests.benchmarks.load --sessions 100 --cycles 5 --soak-seconds 600   # soak

In soak mode each of the N slots starts session after session until the time is up, so N
sessions run at all times. Uses ``TEMPORAL_ADDRESS`` when set, else a dev server in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import resource
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel import ConversationStore, KeelClient, Message, SessionConfig, open_store
from keel.worker.payloads import DATA_CONVERTER
from keel.worker.process.assembly import build_worker
from keel.workflows.messages import tool_uses
from tests.helpers.scripts import write_script
from tests.helpers.temporal import dev_server

TOOLS = "tests.sample_tools"
TURN_TIMEOUT_S = 300.0


@dataclass
class LoadFigures:
    """What a load run measured."""

    sessions: int
    cycles: int
    turns_completed: int = 0
    turns_failed: int = 0
    messages_lost: int = 0
    messages_duplicated: int = 0
    dangling_seen: int = 0
    samples: int = 0
    latencies: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index]

    def lines(self) -> list[str]:
        tag = f"[sessions={self.sessions},cycles={self.cycles}]"
        per_s = self.turns_completed / self.wall_s if self.wall_s else 0.0
        return [
            f"load_turns_completed{tag} {self.turns_completed} turns",
            f"load_turns_failed{tag} {self.turns_failed} turns",
            f"load_messages_lost{tag} {self.messages_lost} messages",
            f"load_messages_duplicated{tag} {self.messages_duplicated} messages",
            f"load_dangling_seen{tag} {self.dangling_seen} states ({self.samples} sampled)",
            f"load_turn_latency_p50_s{tag} {self.percentile(0.5):.2f} s",
            f"load_turn_latency_p99_s{tag} {self.percentile(0.99):.2f} s",
            f"load_turn_latency_max_s{tag} {max(self.latencies, default=float('nan')):.2f} s",
            f"load_wall_s{tag} {self.wall_s:.1f} s",
            f"load_turns_per_s{tag} {per_s:.2f} turns/s",
        ]


def _use(turn: int, cycle: int) -> dict[str, Any]:
    use_id = f"t{turn}c{cycle}"
    if cycle % 2:
        return {"toolUse": {"toolUseId": use_id, "name": "add", "input": {"a": turn, "b": cycle}}}
    return {"toolUse": {"toolUseId": use_id, "name": "echo", "input": {"text": use_id}}}


def script(path: Path, cycles: int, turns: int) -> SessionConfig:
    """A script of ``turns`` turns, each ``cycles`` tool cycles then an answer."""
    responses: list[dict[str, Any]] = []
    for turn in range(turns):
        for cycle in range(cycles):
            responses.append({"content": [_use(turn, cycle)], "stopReason": "tool_use"})
        responses.append({"content": [{"text": f"turn {turn} done"}], "stopReason": "end_turn"})
    return SessionConfig(model=write_script(path, responses), tool_modules=[TOOLS])


def expected_conversation(cycles: int, turns: int) -> list[tuple[str, list[str]]]:
    """(role, toolUse or toolResult ids) of every message the session must hold."""
    out: list[tuple[str, list[str]]] = []
    for turn in range(turns):
        out.append(("user", []))
        for cycle in range(cycles):
            use_id = f"t{turn}c{cycle}"
            out.append(("assistant", [use_id]))
            out.append(("user", [use_id]))
        out.append(("assistant", []))
    return out


def shape(messages: list[Message]) -> list[tuple[str, list[str]]]:
    return [
        (
            m.role,
            [u.toolUseId for u in tool_uses(m)]
            or [b.toolResult.toolUseId for b in m.content if b.toolResult is not None],
        )
        for m in messages
    ]


def dangling(messages: list[Message]) -> bool:
    for i, message in enumerate(messages):
        ids = [u.toolUseId for u in tool_uses(message)]
        if not ids:
            continue
        after = messages[i + 1].content if i + 1 < len(messages) else []
        if [b.toolResult.toolUseId for b in after if b.toolResult is not None][: len(ids)] != ids:
            return True
    return False


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


class LoadRun:
    """Sessions, their checks and the S5 sampler, against one task queue."""

    def __init__(
        self, keel: KeelClient, workdir: Path, sessions: int, cycles: int, turns: int
    ) -> None:
        self.keel = keel
        self.workdir = workdir
        self.cycles = cycles
        self.turns = turns
        self.figures = LoadFigures(sessions=sessions, cycles=cycles)
        self.live: set[str] = set()
        self.config = script(workdir / f"load-{uuid.uuid4().hex[:6]}.json", cycles, turns)

    async def session(self) -> None:
        """One session: its turns one after another, then the check of its conversation."""
        session = f"load-{uuid.uuid4().hex[:12]}"
        figures = self.figures
        self.live.add(session)
        try:
            for turn in range(self.turns):
                ack = await self.keel.prompt(
                    session, f"turn {turn}", config=self.config if turn == 0 else None
                )
                record = await self.keel.wait_turn(
                    session, ack.turn_id, timeout_s=TURN_TIMEOUT_S, through_interrupts=True
                )
                if record.status != "completed":
                    figures.turns_failed += 1
                    figures.problems.append(f"{session} turn {turn}: {record.error}")
                    return
                figures.turns_completed += 1
            state = await self.keel.state(session)
        except Exception as err:  # noqa: BLE001 - counted, reported, and the run goes on
            figures.turns_failed += 1
            figures.problems.append(f"{session}: {type(err).__name__}: {err}")
            return
        finally:
            self.live.discard(session)
        queued = {e.turn: e.at for e in state.events if e.type == "prompt_queued"}
        for event in state.events:
            if event.type == "turn_ended" and event.turn in queued:
                figures.latencies.append(_seconds(queued[event.turn], event.at))
        expected = expected_conversation(self.cycles, self.turns)
        got = shape(state.messages)
        missing = len(expected) - len(got)
        if got != expected:
            figures.problems.append(f"{session}: conversation {got} != {expected}")
            figures.messages_lost += max(missing, 0)
            figures.messages_duplicated += max(-missing, 0)
            if missing == 0:  # same length, different content: count as lost
                figures.messages_lost += sum(
                    1 for a, b in zip(got, expected, strict=True) if a != b
                )

    async def sampler(self, stop: asyncio.Event, every_s: float = 0.05) -> None:
        """Read random live sessions' state; count any that hold a dangling toolUse."""
        rng = random.Random(7)
        while not stop.is_set():
            if self.live:
                session = rng.choice(sorted(self.live))
                try:
                    state = await self.keel.state(session)
                except Exception:  # noqa: BLE001 - a session that just ended, or not started
                    pass
                else:
                    self.figures.samples += 1
                    if dangling(state.messages):
                        self.figures.dangling_seen += 1
                        self.figures.problems.append(f"{session}: dangling toolUse mid-turn")
            await asyncio.sleep(every_s)


async def run_load(
    client: Client,
    task_queue: str,
    store: ConversationStore,
    workdir: Path,
    *,
    sessions: int,
    cycles: int,
    turns: int = 1,
    soak_s: float | None = None,
) -> LoadFigures:
    """Run the sessions (a worker must poll ``task_queue``); returns the figures."""
    run = LoadRun(KeelClient(client, task_queue, store), workdir, sessions, cycles, turns)
    started = time.monotonic()

    async def slot() -> None:
        if soak_s is None:
            await run.session()
            return
        while time.monotonic() - started < soak_s:
            await run.session()

    stop = asyncio.Event()
    sampler = asyncio.create_task(run.sampler(stop))
    try:
        await asyncio.gather(*(slot() for _ in range(sessions)))
    finally:
        stop.set()
        await sampler
    run.figures.wall_s = time.monotonic() - started
    return run.figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--turns", type=int, default=1, help="turns per session")
    parser.add_argument("--soak-seconds", type=float, default=None)
    parser.add_argument("--address", default=None, help="Temporal (default: a dev server)")
    args = parser.parse_args()
    async with contextlib.AsyncExitStack() as stack:
        if args.address:
            client = await Client.connect(args.address, data_converter=DATA_CONVERTER)
            print(f"server {args.address}")
        else:
            client = (await stack.enter_async_context(dev_server())).client
            print("server temporal-dev-server-in-memory")
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(str(Path(tmp) / "store"))
            queue = f"load-{uuid.uuid4().hex[:8]}"
            cache = max(1000, 2 * args.sessions)
            async with build_worker(
                client, queue, [TOOLS], store=store, max_cached_workflows=cache
            ):
                figures = await run_load(
                    client,
                    queue,
                    store,
                    Path(tmp),
                    sessions=args.sessions,
                    cycles=args.cycles,
                    turns=args.turns,
                    soak_s=args.soak_seconds,
                )
    for line in figures.lines():
        print(line)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"load_process_max_rss {rss_mb:.0f} MB")
    for problem in figures.problems[:20]:
        print(f"problem: {problem}")
    if figures.problems:
        raise SystemExit(1)
    print(f"load_latency_median_s {statistics.median(figures.latencies):.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
