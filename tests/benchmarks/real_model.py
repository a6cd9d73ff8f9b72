"""Per-call latency of a real model server, without and with Keel around it.

    python3 -m tests.benchmarks.real_model [--calls 10] [--max-tokens 32] [--prompt TEXT]

Starts the real-model lane's server (llama-cpp-python with SmolLM2-135M-Instruct, see
``tests/real_model/llama_server.py``; ``bash .ci/real-model`` installs it), then, with the
same prompt at temperature 0 (so every call generates the same tokens):

- ``direct``: the chat-completions request Keel's ``openai:`` provider builds for that prompt
  (streamed, no tools), POSTed with urllib and read to the end of its stream;
- ``keel``: a one-turn session per call (``KeelClient.run``: prompt, workflow, model
  activity through the production provider, turn record back), on a Temporal dev server
  and an in-process worker, measured from sending the prompt to holding the settled turn.

One untimed call of each warms up; then calls alternate between the two, so both see the
same machine load. Lines are ``figure[path=P] value unit``: the median and the spread over
the calls, then Keel's overhead (keel median - direct median).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from keel import InferenceConfig, KeelClient, Message, SessionConfig, open_store, text_block
from keel.activities.models.openai import OpenAIProvider
from keel.worker.process.assembly import build_worker
from keel.workflows.activity_contracts import ModelRequest
from tests.helpers.temporal import dev_server
from tests.real_model.llama_server import LlamaServer, missing

MODEL = "openai:smollm2"


def direct_call(url: str, body: bytes) -> str:
    """One streamed chat completion, read to its end; the text it streamed."""
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        method="POST",
    )
    parts: list[str] = []
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices", []):
                parts.append(choice.get("delta", {}).get("content") or "")
    return "".join(parts)


def figures(name: str, seconds: list[float]) -> float:
    median = statistics.median(seconds)
    print(f"latency_median[path={name}] {median * 1000:.0f} ms")
    print(f"latency_min[path={name}] {min(seconds) * 1000:.0f} ms")
    print(f"latency_max[path={name}] {max(seconds) * 1000:.0f} ms")
    return median


async def run(calls: int, max_tokens: int, prompt: str) -> None:
    inference = InferenceConfig(temperature=0, maxTokens=max_tokens)
    config = SessionConfig(model=MODEL, inference=inference)
    with tempfile.TemporaryDirectory() as tmp, LlamaServer(Path(tmp) / "server.log") as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["NO_PROXY"] = "127.0.0.1,localhost"
        provider = OpenAIProvider(MODEL.removeprefix("openai:"))
        request = ModelRequest(
            session_id="bench",
            turn=1,
            cycle=1,
            model=MODEL,
            messages=[Message(role="user", content=[text_block(prompt)])],
            inference=inference,
        )
        body = json.dumps(provider.request_body(request)).encode()
        async with dev_server() as env:
            store = open_store(str(Path(tmp) / "store"))
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            keel = KeelClient(env.client, queue, store)
            async with build_worker(env.client, queue, [], store=store):

                async def through_keel() -> str:
                    record = await keel.run(
                        f"bench-{uuid.uuid4().hex[:8]}", prompt, config=config, timeout_s=300
                    )
                    assert record.status == "completed", record
                    assert record.message is not None
                    return "".join(b.text or "" for b in record.message.content)

                warm_direct = await asyncio.to_thread(direct_call, provider.url, body)
                warm_keel = await through_keel()
                direct: list[float] = []
                kept: list[float] = []
                for _ in range(calls):
                    started = time.perf_counter()
                    text = await asyncio.to_thread(direct_call, provider.url, body)
                    direct.append(time.perf_counter() - started)
                    assert text == warm_direct, (text, warm_direct)
                    started = time.perf_counter()
                    text = await through_keel()
                    kept.append(time.perf_counter() - started)
                    assert text == warm_keel, (text, warm_keel)
    chars = len(warm_direct)
    print(f"# {calls} calls each, prompt {prompt!r}, max_tokens {max_tokens}, temperature 0")
    print(f"# answer ({chars} characters, the same every call): {warm_direct!r}")
    without = figures("direct", direct)
    with_keel = figures("keel", kept)
    print(f"keel_overhead_median {(with_keel - without) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt", default="Reply with one word: hello")
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        raise SystemExit(reason)
    asyncio.run(run(args.calls, args.max_tokens, args.prompt))


if __name__ == "__main__":
    main()
