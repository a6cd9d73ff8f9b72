"""The paths of ``tests.benchmarks.real_model``: one model call made each way.

``direct`` (urllib, no Temporal), ``floor`` (a plain Temporal workflow and activity,
``tests.benchmarks.real_model_floor``), ``keel`` (``KeelClient.run``: the turn comes as the
answer of the session's ``wait_turn`` update) and ``keel_longpoll`` (a Keel turn waited for by
long-polling its history, the way ``KeelClient`` waits when a session does not answer that
update).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel import InferenceConfig, KeelClient, Message, SessionConfig, text_block
from keel.activities.models.openai import OpenAIProvider
from keel.workflows.activity_contracts import ModelRequest
from keel.workflows.contracts import TurnRecord
from keel.workflows.turn_waits import TURN_SETTLED
from tests.benchmarks import real_model_floor
from tests.benchmarks.process_stats import cpu_seconds
from tests.benchmarks.real_model_floor import Streamed, floor_call

MODEL = "openai:smollm2"
PATHS = ("direct", "floor", "keel", "keel_longpoll")


@dataclass(frozen=True)
class Prompt:
    """A prompt as every path sends it: Keel's session config and the provider's request body."""

    text: str
    config: SessionConfig
    body: bytes

    @classmethod
    def build(cls, provider: OpenAIProvider, text: str, max_tokens: int) -> Prompt:
        """The prompt at temperature 0, answered in at most ``max_tokens`` tokens."""
        inference = InferenceConfig(temperature=0, maxTokens=max_tokens)
        request = ModelRequest(
            session_id="bench",
            turn=1,
            cycle=1,
            model=MODEL,
            messages=[Message(role="user", content=[text_block(text)])],
            inference=inference,
        )
        body = provider.request_body(request)
        return cls(text, SessionConfig(model=MODEL, inference=inference), json.dumps(body).encode())


async def turn_by_history(keel: KeelClient, session_id: str, turn_id: int) -> TurnRecord:
    """Wait for a turn by long-polling the session's history, asking the turn query after
    each completed workflow task (only to measure what ``wait_turn``'s polling costs)."""
    handle = keel.client.get_workflow_handle(session_id)
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            record = await keel.turn(session_id, turn_id)
            if record.status in TURN_SETTLED:
                return record
    raise RuntimeError(f"session {session_id!r} closed before turn {turn_id} settled")


def child_pid(command: str, argument: str) -> int:
    """The pid of this process's child running ``command`` (its ``comm``) with ``argument``
    among its arguments (a test process may have started other dev servers)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if comm == command and ppid == os.getpid() and argument.encode() in args:
            return int(entry.name)
    raise RuntimeError(f"no child process {command!r} with {argument!r}")


def pin(pid: int, cpus: set[int]) -> None:
    """Keep every thread of a process (and the threads it starts later) on ``cpus``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


class Paths:
    """One call on each path, to the same server with the same request.

    Attributes:
        pids: the processes whose CPU time is counted: ``python`` (this one: the client, both
            workers, the direct calls' threads), ``temporal`` (the dev server), ``llama``.
    """

    def __init__(
        self, url: str, keel: KeelClient, floor: Client, floor_queue: str, pids: dict[str, int]
    ) -> None:
        self.url = url
        self.keel = keel
        self.floor = floor
        self.floor_queue = floor_queue
        self.pids = pids

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each process of ``pids``."""
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    async def call(self, path: str, prompt: Prompt, name: str | None = None) -> Streamed:
        """The answer of one call on ``path``; a Keel call's ``completion_tokens`` is the
        server's usage as its turn record has it, None when absent.

        Args:
            path: one of ``PATHS``.
            prompt: what to send.
            name: the workflow's id (``floor``, ``keel*``); default a new one.
        """
        name = name or f"bench-{uuid.uuid4().hex[:8]}"
        if path == "direct":
            return await asyncio.to_thread(real_model_floor.stream_chat, self.url, prompt.body)
        if path == "floor":
            return await floor_call(self.floor, self.floor_queue, name, self.url, prompt.body)
        if path == "keel":
            record = await self.keel.run(name, prompt.text, config=prompt.config, timeout_s=300)
        elif path == "keel_longpoll":
            ack = await self.keel.prompt(name, prompt.text, config=prompt.config)
            record = await asyncio.wait_for(turn_by_history(self.keel, name, ack.turn_id), 300)
        else:
            raise ValueError(f"unknown path {path!r}")
        assert record.status == "completed", record
        assert record.message is not None
        text = "".join(b.text or "" for b in record.message.content)
        return Streamed(text, 0, record.usage.outputTokens or None)

    async def call_many(self, path: str, prompt: Prompt, calls: int) -> list[Streamed]:
        """``calls`` calls at once on ``path``; their answers."""
        return list(await asyncio.gather(*(self.call(path, prompt) for _ in range(calls))))


def rotated(items: Sequence[str], by: int) -> list[str]:
    """``items`` starting at ``by`` (modulo its length)."""
    at = by % len(items)
    return [*items[at:], *items[:at]]
