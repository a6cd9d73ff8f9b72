"""The raw floor of ``tests.benchmarks.real_model``: one model call as plain Temporal runs it.

One workflow (``RealFloor``) runs one activity (``real_floor.chat``) that POSTs a streamed
chat-completions request with urllib, in a thread, and reads the stream to its end; the
workflow returns the activity's result, which the client awaits. No Keel: the default data
converter, the default sandbox, no heartbeats, no store. ``stream_chat`` is also the
benchmark's ``direct`` path, so both send the same bytes and read them the same way.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

WORKFLOW = "RealFloor"
ACTIVITY = "real_floor.chat"
TIMEOUT = timedelta(seconds=300)


@dataclass
class Streamed:
    """What one streamed chat completion delivered.

    Attributes:
        text: the streamed text, joined.
        chunks: the chunks that carried text (llama.cpp's server streams one token per
            chunk; its role chunk and its closing chunk carry none).
        completion_tokens: the server's ``usage.completion_tokens``, when it sent usage.
    """

    text: str
    chunks: int
    completion_tokens: int | None

    def tokens(self) -> int:
        """Completion tokens: the server's count, else the chunks that carried text."""
        return self.chunks if self.completion_tokens is None else self.completion_tokens


def stream_chat(url: str, body: bytes) -> Streamed:
    """POST one streamed chat completion and read it to its end (blocking)."""
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        method="POST",
    )
    parts: list[str] = []
    chunks = 0
    tokens: int | None = None
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or {}
            if "completion_tokens" in usage:
                tokens = int(usage["completion_tokens"])
            for choice in chunk.get("choices", []):
                text = choice.get("delta", {}).get("content") or ""
                chunks += bool(text)
                parts.append(text)
    return Streamed("".join(parts), chunks, tokens)


@activity.defn(name=ACTIVITY)
async def floor_chat(call: dict[str, Any]) -> dict[str, Any]:
    """The call's streamed completion, read in a thread: its text, chunks and tokens."""
    streamed = await asyncio.to_thread(stream_chat, call["url"], call["body"].encode())
    return {
        "text": streamed.text,
        "chunks": streamed.chunks,
        "completion_tokens": streamed.completion_tokens,
    }


@workflow.defn(name=WORKFLOW)
class RealFloor:
    """One activity, its result returned."""

    @workflow.run
    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            ACTIVITY, call, start_to_close_timeout=TIMEOUT
        )
        return result


def plain_client(client: Client) -> Client:
    """The same connection with temporalio's default data converter (no Keel codec)."""
    config = client.config()
    config["data_converter"] = DataConverter.default
    return Client(**config)


def floor_worker(client: Client, task_queue: str) -> Worker:
    """An in-process worker for ``RealFloor`` on its own task queue."""
    return Worker(client, task_queue=task_queue, workflows=[RealFloor], activities=[floor_chat])


async def floor_call(
    client: Client, task_queue: str, workflow_id: str, url: str, body: bytes
) -> Streamed:
    """Run one ``RealFloor`` workflow and await its result."""
    result = await client.execute_workflow(
        WORKFLOW,
        {"url": url, "body": body.decode()},
        id=workflow_id,
        task_queue=task_queue,
        result_type=dict,
    )
    return Streamed(result["text"], result["chunks"], result["completion_tokens"])
