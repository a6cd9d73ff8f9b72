"""Streamed model text as a watcher sees it: heartbeat snapshots against the stream endpoint.

    python3 -m tests.benchmarks.streaming [--rates 50 1000] [--seconds 4] [--rounds 3]

The fake Bedrock streams a model call's text at a fixed rate (tokens of 7 characters, one
delta each) to a ``keel worker`` process through real boto3; a reader in this process follows
it with ``KeelClient.model_text``, the API ``keel watch`` and ``keel run --progress`` print
from. Two workers run side by side on one dev server, each on its own task queue:

- ``heartbeats`` (the old path): the stream endpoint off (``KEEL_STREAM_LISTEN=off``), so the
  reader gets what it got before: snapshots of the last 4000 characters from the model
  activity's heartbeat details, read by ``describe`` about twice a second.
- ``endpoint`` (the new path): the reader finds the worker's stream endpoint in the heartbeat
  details and reads every character from it.

Calls alternate between the two paths, so both see the same machine load. For each path:

- ``model_rate``: the rate the fake achieved (its sleeps are not exact);
- ``completeness``: characters received, each at its place, / characters the model sent (a
  gap, or an end that never arrived, counts as missing);
- ``in_order``: 1 when every chunk is the model's text at its offset, after the one before;
- ``latency_p50`` / ``latency_p99``: from the fake sending a token to the reader holding it,
  over the tokens received;
- ``heartbeat_rpcs_per_call``: the worker's ``RecordActivityTaskHeartbeat`` calls, from the
  dev server's own metrics (``service_requests`` of the frontend);
- ``reader_describe_rpcs_per_call``: the reader's ``describe`` calls, counted by a client
  interceptor.

Lines are ``figure[rate=R,path=P] value unit``, then the ratio endpoint / heartbeats of
completeness and latency.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
)

from keel import KeelClient, SessionConfig, TextChunk
from keel.worker.payloads import data_converter
from keel.worker.server.devserver import DevServer, free_ports
from tests.fakes.bedrock_server import FakeBedrock, Reply
from tests.helpers.cli import ROOT, keel_env

PATHS = ("heartbeats", "endpoint")
# Both paths at issue 23's 2 s heartbeat timeout (Keel's default until issue 45), where a call
# beats every 0.67 s: at today's 30 s a reader without the endpoint sees text every 10 s.
HEARTBEAT_TIMEOUT_S = 2.0
TOKEN_CHARS = 7
MODEL = "bedrock:bench.streaming"
STREAM_RPCS = ("RecordActivityTaskHeartbeat", "DescribeWorkflowExecution")


class DescribeCounter(Interceptor):
    """Counts the ``describe`` calls of a client: a reader's own RPCs."""

    def __init__(self) -> None:
        self.count = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counter = self

        class Counting(OutboundInterceptor):
            async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
                counter.count += 1
                return await super().describe_workflow(input)

        return Counting(next)


class MetricsServer(DevServer):
    """A headless in-memory dev server that serves its Prometheus metrics."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, ui=False, log_level="error", in_memory=True)
        [self.metrics_port] = free_ports(1)

    def _command(self, cli: str) -> list[str]:
        return [*super()._command(cli), "--metrics-port", str(self.metrics_port)]

    def rpc_counts(self) -> dict[str, float]:
        """The frontend's ``service_requests`` by operation (the clients' and workers' RPCs).

        The dev server runs every Temporal service in one process; each counts the requests
        it serves, so only the frontend's count what came from outside.
        """
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("service_requests{") or 'service_name="frontend"' not in line:
                continue
            match = re.search(r'operation="([^"]+)"', line)
            if match is not None:
                counts[match[1]] = counts.get(match[1], 0.0) + float(line.rsplit(" ", 1)[1])
        return counts


@dataclass
class Call:
    """What one streaming call showed a reader."""

    sent: list[tuple[float, str]]
    received: list[tuple[float, TextChunk]]
    rpcs: dict[str, float]

    @property
    def text(self) -> str:
        return "".join(part for _, part in self.sent)

    def in_order(self) -> bool:
        """Every chunk is the model's text at its offset, after the chunk before it."""
        text, reached = self.text, 0
        for _, chunk in self.received:
            if not chunk.text:
                continue
            if chunk.offset < reached or not text.startswith(chunk.text, chunk.offset):
                return False
            reached = chunk.offset + len(chunk.text)
        return True

    def delivered(self) -> int:
        """Characters received at their place, each once (``in_order`` checks the places)."""
        return sum(len(chunk.text) for _, chunk in self.received if chunk.text)

    def rate(self) -> float:
        """Tokens per second the fake actually sent (its sleeps are not exact)."""
        span = self.sent[-1][0] - self.sent[0][0] if len(self.sent) > 1 else 0.0
        return (len(self.sent) - 1) / span if span > 0 else float("nan")

    def latencies(self) -> list[float]:
        """Seconds from the fake sending each token to the reader holding all of it."""
        arrivals: list[tuple[int, float]] = []  # (end offset of a chunk, when it arrived)
        for at, chunk in self.received:
            if chunk.text:
                arrivals.append((chunk.offset + len(chunk.text), at))
        out, end, index = [], 0, 0
        for sent_at, part in self.sent:
            end += len(part)
            while index < len(arrivals) and arrivals[index][0] < end:
                index += 1
            if index == len(arrivals):
                break
            out.append(arrivals[index][1] - sent_at)
        return out


@dataclass
class Path_:
    """One reading path: its worker's task queue and the calls measured."""

    name: str
    task_queue: str
    calls: list[Call] = field(default_factory=list)


async def one_call(
    keel: KeelClient,
    reader: KeelClient,
    bedrock: FakeBedrock,
    server: MetricsServer,
    tokens: int,
    rate: float,
) -> Call:
    """Stream one model call of ``tokens`` at ``rate`` per second and follow it.

    ``keel`` sends the prompt and waits for the turn; ``reader`` (a client counting its
    ``describe`` calls) follows the text.
    """
    session = f"stream-{uuid.uuid4().hex[:10]}"
    answer = [f"t{i:05d} " for i in range(tokens)]
    assert all(len(t) == TOKEN_CHARS for t in answer)
    bedrock.script(Reply([{"text": "".join(answer)}], text_deltas=tokens, pace_s=1 / rate))
    before_sent = len(bedrock.sent)
    before = server.rpc_counts()
    counter = reader.client.config()["interceptors"][0]
    assert isinstance(counter, DescribeCounter)
    described = counter.count
    received: list[tuple[float, TextChunk]] = []
    config = SessionConfig(model=MODEL, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)
    await keel.prompt(session, "stream", config=config)

    async def follow() -> None:
        async for chunk in reader.model_text(session):
            received.append((time.time(), chunk))
            if chunk.end:
                return

    reading = asyncio.create_task(follow())
    record = await keel.wait_turn(session, 1, timeout_s=tokens / rate + 60)
    assert record.status == "completed", record
    try:  # the endpoint's end arrives first; a heartbeat reader learns it on its next look
        await asyncio.wait_for(reading, 5)
    except TimeoutError:
        pass
    after = server.rpc_counts()
    rpcs = {op: after.get(op, 0.0) - before.get(op, 0.0) for op in STREAM_RPCS}
    rpcs["reader_describe"] = counter.count - described
    return Call(bedrock.sent[before_sent:], received, rpcs)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def report(paths: list[Path_], rate: float, out: Callable[[str], None]) -> dict[str, float]:
    """Print each figure per path and their ratio; the figures by name."""
    figures: dict[str, float] = {}
    for path in paths:
        sent = sum(len(c.text) for c in path.calls)
        latencies = [x for c in path.calls for x in c.latencies()]
        values = {
            "completeness": sum(c.delivered() for c in path.calls) / sent,
            "model_rate": statistics.mean(c.rate() for c in path.calls),
            "in_order": float(all(c.in_order() for c in path.calls)),
            "latency_p50": 1000 * percentile(latencies, 0.5) if latencies else float("nan"),
            "latency_p99": 1000 * percentile(latencies, 0.99) if latencies else float("nan"),
            "heartbeat_rpcs_per_call": statistics.mean(
                c.rpcs["RecordActivityTaskHeartbeat"] for c in path.calls
            ),
            "reader_describe_rpcs_per_call": statistics.mean(
                c.rpcs["reader_describe"] for c in path.calls
            ),
        }
        for name, value in values.items():
            figures[f"{name}[rate={rate:g},path={path.name}]"] = value
    units = {
        "latency_p50": "ms",
        "latency_p99": "ms",
        "completeness": "ratio",
        "model_rate": "tokens/s",
    }
    for name in ("model_rate", "completeness", "in_order", "latency_p50", "latency_p99"):
        for path in paths:
            key = f"{name}[rate={rate:g},path={path.name}]"
            out(f"{key} {figures[key]:.3f} {units.get(name, 'bool')}")
    for name in ("heartbeat_rpcs_per_call", "reader_describe_rpcs_per_call"):
        for path in paths:
            key = f"{name}[rate={rate:g},path={path.name}]"
            out(f"{key} {figures[key]:.2f} rpcs")
    old, new = (f"[rate={rate:g},path={p}]" for p in PATHS)
    for name in ("completeness", "latency_p50", "latency_p99"):
        ratio = figures[name + new] / figures[name + old] if figures[name + old] else math.nan
        figures[f"{name}_ratio[rate={rate:g}]"] = ratio
        out(f"{name}_ratio[rate={rate:g}] {ratio:.3f} endpoint/heartbeats")
    return figures


async def worker(
    address: str, task_queue: str, home: Path, bedrock: FakeBedrock, endpoint: bool
) -> asyncio.subprocess.Process:
    """``keel worker`` on its own task queue, talking to the fake Bedrock."""
    env = keel_env(
        TEMPORAL_ADDRESS=address,
        KEEL_TASK_QUEUE=task_queue,
        KEEL_HOME=str(home),
        KEEL_STREAM_LISTEN="127.0.0.1:0" if endpoint else "off",
        AWS_ENDPOINT_URL_BEDROCK_RUNTIME=bedrock.endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel.worker.cli", "worker", env=env, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def run(
    rates: list[float], seconds: float, rounds: int, out: Callable[[str], None] = print
) -> dict[str, float]:
    """Measure both paths at each rate; print and return the figures."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, FakeBedrock() as bedrock:
        server = MetricsServer(Path(tmp) / "temporal")
        await server.start()
        workers: list[asyncio.subprocess.Process] = []
        try:
            client = await Client.connect(server.address, data_converter=data_converter(None))
            paths = [Path_(name, f"stream-{name}-{uuid.uuid4().hex[:6]}") for name in PATHS]
            for path in paths:
                workers.append(
                    await worker(
                        server.address, path.task_queue, Path(tmp), bedrock, path.name == "endpoint"
                    )
                )
            converter = data_converter(None)
            counter = DescribeCounter()
            reading = await Client.connect(
                server.address, data_converter=converter, interceptors=[counter]
            )
            keels = {p.name: KeelClient(client, p.task_queue) for p in paths}
            readers = {p.name: KeelClient(reading, p.task_queue) for p in paths}
            await asyncio.gather(  # warm-up: each worker polls, boto3 is imported
                *(one_call(keels[p.name], readers[p.name], bedrock, server, 2, 100) for p in paths)
            )
            out(
                f"# {rounds} calls per path and rate, {seconds:g} s each, alternating; tokens of "
                f"{TOKEN_CHARS} characters, one delta each; cpus={os.cpu_count()}"
            )
            for rate in rates:
                for path in paths:
                    path.calls.clear()
                tokens = max(2, int(rate * seconds))
                for _ in range(rounds):
                    for path in paths:
                        call = one_call(
                            keels[path.name], readers[path.name], bedrock, server, tokens, rate
                        )
                        path.calls.append(await call)
                figures.update(report(paths, rate, out))
        finally:
            for process in workers:
                if process.returncode is None:
                    process.terminate()
                    await process.wait()
            await server.stop()
    return figures


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 1000.0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.rates, args.seconds, args.rounds))


if __name__ == "__main__":
    main()
