"""What each cycle adds to workflow history, by event type, payload and non-payload bytes.

Runs one session of N tool cycles (each tool returning 2 KB, as ``tests.benchmarks.history``)
on its own dev server, fetches every run's history and prints, per event type, how many
events, their protobuf bytes, how many of those are payload bytes (``Payload.data``, with
``Payload.metadata``) and the bytes per cycle. ``--show TYPE`` prints the payloads of the
first event of that type that has any. Usage::

    python -m tests.benchmarks.history_profile --cycles 100
    python -m tests.benchmarks.history_profile --cycles 10 --show ACTIVITY_TASK_SCHEDULED
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from tests.benchmarks.history import loop_session, script
from tests.helpers.temporal import dev_server, run_histories


@dataclass
class Row:
    """Totals of one event type."""

    events: int = 0
    total: int = 0
    payload: int = 0


def payloads(message: ProtoMessage) -> Iterator[Payload]:
    """Every ``Payload`` nested anywhere in a protobuf message."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for item in value.values():
                    yield from payloads(item)
        elif field.is_repeated:
            for item in value:
                yield from payloads(item)
        else:
            yield from payloads(value)


def profile(events: list[HistoryEvent]) -> dict[str, Row]:
    """Bytes of the events by event type name."""
    rows: dict[str, Row] = defaultdict(Row)
    for event in events:
        row = rows[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")]
        row.events += 1
        row.total += event.ByteSize()
        row.payload += sum(p.ByteSize() for p in payloads(event))
    return rows


def show(events: list[HistoryEvent], kind: str) -> None:
    """Print the payloads of the first event of a type that carries any."""
    for event in events:
        if EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") != kind:
            continue
        found = list(payloads(event))
        if not found:
            continue
        for p in found:
            meta = {k: v.decode(errors="replace") for k, v in p.metadata.items()}
            print(f"# payload {p.ByteSize()} B metadata={meta}")
            print(p.data.decode(errors="replace")[:3000])
        print(f"# event without payloads: {event.ByteSize() - sum(p.ByteSize() for p in found)} B")
        return


async def record(client: Client, cycles: int, workdir: Path) -> list[HistoryEvent]:
    """Every event of every run of one session of ``cycles`` tool cycles (2 KB each)."""
    model = script(workdir / f"script-{cycles}.json", cycles)
    async with loop_session(client, workdir, model, f"profile-{cycles}") as loop:
        done = await loop.run(timeout_s=3600)
    assert done.status == "completed", done.error
    return [e for h in await run_histories(client, loop.session) for e in h.events]


def report(rows: dict[str, Row], cycles: int) -> list[str]:
    """The table: one line per event type, largest first, then the total."""
    lines = [
        f"{'event type':45} {'events':>7} {'bytes':>10} {'payload':>10} {'other':>9} {'/cycle':>8}"
    ]
    total = Row(
        sum(r.events for r in rows.values()),
        sum(r.total for r in rows.values()),
        sum(r.payload for r in rows.values()),
    )
    for name, row in [*sorted(rows.items(), key=lambda kv: -kv[1].total), ("total", total)]:
        lines.append(
            f"{name:45} {row.events:7d} {row.total:10d} {row.payload:10d} "
            f"{row.total - row.payload:9d} {row.total / cycles:8.0f}"
        )
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--show", action="append", default=[], metavar="TYPE")
    args = parser.parse_args()
    async with dev_server() as env:
        with tempfile.TemporaryDirectory() as tmp:
            events = await record(env.client, args.cycles, Path(tmp))
            print(f"# cycles={args.cycles} events={len(events)}")
            print("\n".join(report(profile(events), args.cycles)))
            for kind in args.show:
                show(events, kind)


if __name__ == "__main__":
    asyncio.run(main())
