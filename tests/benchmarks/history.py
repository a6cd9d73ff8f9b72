"""History growth of a long tool loop: bytes of workflow history per conversation byte.

Runs one session per cycle count on its own dev server (in-memory persistence), each a
single turn of N tool cycles whose tool returns 2 KB, and prints one ``figure value unit``
line per figure. Usage::

    python -m tests.benchmarks.history --cycles 100 300 1000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from keel import KeelClient, SessionConfig, TurnRecord, open_store
from keel.activities.store.base import canonical_json
from keel.worker.process.assembly import build_worker
from tests.helpers.scripts import write_script
from tests.helpers.temporal import dev_server, run_histories

RESULT_BYTES = 2048


async def history_of(client: Client, session: str) -> tuple[int, int, int]:
    """Protobuf bytes and events of every run of a session, and how many runs."""
    runs = await run_histories(client, session)
    events = [e for h in runs for e in h.events]
    return sum(e.ByteSize() for e in events), len(events), len(runs)


@dataclass(frozen=True)
class LoopSession:
    """A session of a scripted tool loop, on a worker of ``tests.sample_tools``."""

    keel: KeelClient
    session: str
    config: SessionConfig

    async def run(self, timeout_s: float) -> TurnRecord:
        """The loop's one turn, to its end."""
        return await self.keel.run(self.session, "loop", config=self.config, timeout_s=timeout_s)


@asynccontextmanager
async def loop_session(
    client: Client, workdir: Path, model: str, name: str
) -> AsyncIterator[LoopSession]:
    """A worker on a fresh task queue (store under ``workdir``) and a new session named ``name-…``.

    The history benchmark and the history and replay profilers run their loops this way.
    """
    store = open_store(str(workdir / "store"))
    queue = f"{name}-{uuid.uuid4().hex[:8]}"
    config = SessionConfig(
        model=model, tool_modules=["tests.sample_tools"], max_cycles_per_turn=None
    )
    async with build_worker(client, queue, ["tests.sample_tools"], store=store):
        session = f"{name}-{uuid.uuid4().hex[:6]}"
        yield LoopSession(KeelClient(client, queue, store), session, config)


def script(path: Path, cycles: int) -> str:
    responses = [
        {
            "content": [
                {"toolUse": {"toolUseId": f"c{i}", "name": "big", "input": {"size": RESULT_BYTES}}}
            ],
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 10},
        }
        for i in range(cycles)
    ]
    responses.append({"content": [{"text": "done"}], "stopReason": "end_turn"})
    return write_script(path, responses)


async def measure(client: Client, cycles: int, workdir: Path) -> None:
    model = script(workdir / f"script-{cycles}.json", cycles)
    started = time.monotonic()
    async with loop_session(client, workdir, model, f"history-{cycles}") as loop:
        record = await loop.run(timeout_s=3600)
        state = await loop.keel.state(loop.session)
    elapsed = time.monotonic() - started
    assert record.status == "completed", record.error
    conversation = sum(len(canonical_json(m.model_dump(mode="json"))) for m in state.messages)
    size, events, runs = await history_of(client, loop.session)
    print(f"history_bytes[cycles={cycles}] {size} bytes")
    print(f"history_events[cycles={cycles}] {events} events")
    print(f"history_runs[cycles={cycles}] {runs} runs")
    print(f"conversation_bytes[cycles={cycles}] {conversation} bytes")
    print(f"history_per_conversation_byte[cycles={cycles}] {size / conversation:.2f} ratio")
    print(f"history_bytes_per_cycle[cycles={cycles}] {size / cycles:.0f} bytes")
    print(f"turn_wall_time[cycles={cycles}] {elapsed:.1f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, nargs="+", default=[100, 300])
    args = parser.parse_args()
    async with dev_server() as env:
        print("server temporal-dev-server-in-memory")
        with tempfile.TemporaryDirectory() as tmp:
            for cycles in args.cycles:
                await measure(env.client, cycles, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
