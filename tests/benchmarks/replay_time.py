"""Replay time per session against the original's: what ``keel replay`` costs.

Issue 43 asks for the figure. Each of S sessions runs T turns; each turn makes C tool cycles
and answers: every model call takes M seconds (the scripted model's ``delay_s``) and every
tool call T_s seconds (the ``slow`` tool). Then each session is replayed
(``KeelClient.replay``) with a new scripted model that makes the same calls, its calls taking
M seconds too: the replay answers the tools from the recording, so what it saves is the tools'
time, and what it adds is its own start, one prompt per turn and its close.

Figures, one ``figure value unit`` per line, tagged ``[turns=T,cycles=C,model_s=M,tool_s=X]``:

- ``original_session_s`` / ``replay_session_s``: the median wall time of a session's turns
  as its client saw them (prompt to turn ended), and of its replay (start to report);
- ``replay_ratio``: the median of replay / original, session by session (side by side in one
  run, on one server and worker);
- ``replay_overhead_s``: the median of replay minus the model's time (what is Keel's);
- ``tools_run_in_replays``: lines the tools wrote during the replays (must be 0).

Usage::

    python3 -m tests.benchmarks.replay_time [--sessions 5] [--turns 3] [--cycles 2]
        [--model-s 0.5] [--tool-s 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.worker.process.assembly import build_worker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import dev_server


@dataclass
class Shape:
    """The workload of one run of the benchmark."""

    sessions: int = 5
    turns: int = 3
    cycles: int = 2
    model_s: float = 0.5
    tool_s: float = 1.0

    @property
    def tag(self) -> str:
        """The figures' tag."""
        return (
            f"[turns={self.turns},cycles={self.cycles},model_s={self.model_s:g},"
            f"tool_s={self.tool_s:g}]"
        )


def responses(shape: Shape, marks: Path, prefix: str) -> list[dict[str, Any]]:
    """Each turn: ``cycles`` calls of ``slow`` (and one ``record`` that marks a run), an answer."""
    out = []
    for turn in range(1, shape.turns + 1):
        out.append(
            respond(
                tool_use(f"{prefix}{turn}w", "record", path=str(marks), value=f"t{turn}"),
                stop="tool_use",
                delay_s=shape.model_s,
            )
        )
        for cycle in range(1, shape.cycles + 1):
            use = tool_use(
                f"{prefix}{turn}c{cycle}", "slow", seconds=shape.tool_s, label=f"{turn}.{cycle}"
            )
            out.append(respond(use, stop="tool_use", delay_s=shape.model_s))
        out.append(respond(text(f"turn {turn} done"), delay_s=shape.model_s))
    return out


@dataclass
class Measured:
    """One session and its replay."""

    original_s: float
    replay_s: float
    model_s: float
    diverged: bool


async def one(keel: KeelClient, shape: Shape, workdir: Path, marks: Path) -> Measured:
    """Run a session, then replay it with a model that makes the same calls."""
    session = f"bench-{uuid.uuid4().hex[:8]}"
    model = write_script(workdir / f"{session}.json", responses(shape, marks, "o"))
    config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
    began = time.monotonic()
    for turn in range(1, shape.turns + 1):
        record = await keel.run(session, f"turn {turn}", config=config, timeout_s=600)
        assert record.status == "completed", record.error
    original = time.monotonic() - began
    replay_model = write_script(workdir / f"{session}-r.json", responses(shape, marks, "r"))
    report = await keel.replay(session, model=replay_model, turn_timeout_s=600)
    calls = shape.turns * (shape.cycles + 2)
    return Measured(original, report.seconds, calls * shape.model_s, report.diverged)


async def run_replay_time(client: Client, shape: Shape, workdir: Path) -> list[str]:
    """Run the workload; returns the figure lines."""
    queue = f"bench-replay-{uuid.uuid4().hex[:8]}"
    store = open_store(str(workdir / "store"))
    keel = KeelClient(client, queue, store)
    marks = workdir / "marks.txt"
    worker = build_worker(client, queue, [SAMPLE_TOOLS], store=store)
    measured = []
    async with worker:
        for _ in range(shape.sessions):
            before = len(marks.read_text().splitlines()) if marks.exists() else 0
            result = await one(keel, shape, workdir, marks)
            after = len(marks.read_text().splitlines())
            assert after - before == shape.turns, "the original session's write tool ran"
            measured.append(result)
    ran = len(marks.read_text().splitlines()) - shape.sessions * shape.turns
    tag = shape.tag
    original = statistics.median(m.original_s for m in measured)
    replay = statistics.median(m.replay_s for m in measured)
    ratio = statistics.median(m.replay_s / m.original_s for m in measured)
    overhead = statistics.median(m.replay_s - m.model_s for m in measured)
    return [
        f"original_session_s{tag} {original:.3f} s",
        f"replay_session_s{tag} {replay:.3f} s",
        f"replay_ratio{tag} {ratio:.3f} x",
        f"replay_overhead_s{tag} {overhead:.3f} s",
        f"replay_diverged{tag} {sum(m.diverged for m in measured)} sessions",
        f"tools_run_in_replays{tag} {ran} lines",
    ]


async def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its lines."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--model-s", type=float, default=0.5)
    parser.add_argument("--tool-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    shape = Shape(args.sessions, args.turns, args.cycles, args.model_s, args.tool_s)
    with tempfile.TemporaryDirectory(prefix="keel-replay-time-") as tmp:
        async with dev_server() as env:
            lines = await run_replay_time(env.client, shape, Path(tmp))
    print("\n".join(lines), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
