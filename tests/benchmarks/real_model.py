"""A real model server's turn: alone, under the raw Temporal floor, and through Keel.

    python3 -m tests.benchmarks.real_model [--calls 20] [--max-tokens 32] [--prompt TEXT]
        [--concurrency 8] [--rounds 5] [--concurrent-max-tokens 64] [--story TEXT]
        [--profile 0]

Starts the real-model lane's server (llama-cpp-python with SmolLM2-135M-Instruct, see
``tests/real_model/llama_server.py``; ``bash .ci/real-model`` installs it), a Temporal dev
server and, in this process, a Keel worker and a floor worker (each on its own task queue).
Every path sends the chat-completions request Keel's ``openai:`` provider builds for the
prompt (streamed, no tools, temperature 0: every call generates the same tokens):

- ``direct``: POSTed with urllib (in a thread) and read to the end of its stream;
- ``floor``: the same, in the one activity of a plain Temporal workflow (no Keel, the default
  data converter; ``tests.benchmarks.real_model_floor``), the workflow's result awaited;
- ``keel``: a one-turn session per call (``KeelClient.run``: prompt, workflow, model
  activity through the production provider, turn record back by ``wait_turn``);
- ``keel_longpoll``: the same session, its turn waited for by long-polling the session's
  history (a turn query after each completed workflow task) instead of ``wait_turn``'s
  query polling, which backs off from 50 ms to 500 ms: what that polling costs.

Latency: one untimed call per path warms up; then ``--calls`` calls per path, one of each in
turn, the order rotated each time, so all see the same machine load. Lines are
``figure[path=P] value unit``: median and spread per path, then each path's overhead (its
median - direct's) and Keel's overhead / the floor's (goal: at most 1).

Concurrency: ``--rounds`` rounds; in each, every path runs ``--concurrency`` calls at once
against the one server (the order of the paths rotated each round), with a longer answer
(``--concurrent-max-tokens``). Tokens per second = completion tokens / the batch's wall time;
the median over the rounds per path, and its ratio to direct's (goal for Keel: at least
0.95). Tokens are the server's ``usage.completion_tokens`` when its stream carries usage, else
the streamed chunks that carry text (llama.cpp streams a token per chunk); a Keel call, whose
record then has no usage, counts the tokens of the direct warm-up call, whose text it must
equal. A ``#`` line says which.

``--pin`` keeps the llama server on the last CPU and this process and the dev server on the
others (other processes of the machine are left where they are), so that the CPU the Temporal
paths spend cannot slow the model down; a ``#`` line says so.

``--profile N`` then times N more calls of each path stage by stage, and one batch per path
(``tests.benchmarks.real_model_profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from keel import KeelClient, open_store
from keel.activities.models.openai import OpenAIProvider
from keel.worker.process.assembly import build_worker
from tests.benchmarks.real_model_floor import Streamed, floor_worker, plain_client
from tests.benchmarks.real_model_paths import (
    MODEL,
    PATHS,
    Paths,
    Prompt,
    child_pid,
    pin,
    rotated,
)
from tests.benchmarks.real_model_profile import profile
from tests.helpers.temporal import dev_server
from tests.real_model.llama_server import LlamaServer, missing

Out = Callable[[str], None]


def spread(out: Out, figures: dict[str, float], name: str, values: list[float], unit: str) -> float:
    """Print and keep the median, lowest and highest of ``values`` as ``name_*[path=P]``."""
    median = statistics.median(values)
    scale = 1000.0 if unit == "ms" else 1.0
    for label, value in (("median", median), ("min", min(values)), ("max", max(values))):
        key = name.replace("*", label)
        figures[key] = value * scale
        out(f"{key} {value * scale:.{0 if unit == 'ms' else 1}f} {unit}")
    return median


async def timed(paths: Paths, path: str, prompt: Prompt, calls: int) -> Timed:
    """``calls`` calls at once on ``path``: their answers, wall time and CPU time."""
    before = paths.cpu()
    started = time.perf_counter()
    answers = await paths.call_many(path, prompt, calls)
    wall = time.perf_counter() - started
    after = paths.cpu()
    return Timed(answers, wall, {name: after[name] - before[name] for name in after})


@dataclass
class Timed:
    """What ``timed`` measured.

    Attributes:
        answers: each call's answer.
        wall: seconds from the first call sent to the last answer held.
        cpu: CPU seconds used meanwhile, by process (``Paths.pids``).
    """

    answers: list[Streamed]
    wall: float
    cpu: dict[str, float]


def cpu_lines(
    out: Out, figures: dict[str, float], name: str, cpu: dict[str, list[dict[str, float]]]
) -> None:
    """Print the median CPU time of each path in each process, in ms (``name`` has ``{}``
    for the labels)."""
    for path, samples in cpu.items():
        for proc in samples[0]:
            key = name.format(f"path={path},proc={proc}")
            figures[key] = statistics.median(s[proc] for s in samples) * 1000
            out(f"{key} {figures[key]:.0f} ms")


async def latencies(paths: Paths, prompt: Prompt, calls: int, out: Out) -> dict[str, float]:
    """Per-call latency of each path, and the overheads over direct."""
    warm = {path: await paths.call(path, prompt) for path in PATHS}
    seconds: dict[str, list[float]] = {path: [] for path in PATHS}
    cpu: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    for index in range(calls):
        for path in rotated(PATHS, index):
            call = await timed(paths, path, prompt, 1)
            seconds[path].append(call.wall)
            cpu[path].append(call.cpu)
            (answer,) = call.answers
            assert answer.text == warm[path].text, (path, answer.text, warm[path].text)
    text = warm["direct"].text
    same = all(w.text == text for w in warm.values())
    out(
        f"# latency: {calls} calls per path, prompt {prompt.text!r}, temperature 0, "
        f"max_tokens {max_tokens(prompt)}"
    )
    out(
        f"# answer ({len(text)} characters, {warm['direct'].tokens()} tokens, the same every "
        f"call{', on every path' if same else ', NOT the same on every path'}): {text!r}"
    )
    figures: dict[str, float] = {}
    medians = {
        path: spread(out, figures, f"latency_*[path={path}]", seconds[path], "ms") for path in PATHS
    }
    out(f"keel_overhead_median {(medians['keel'] - medians['direct']) * 1000:.0f} ms")
    figures["keel_overhead_median"] = (medians["keel"] - medians["direct"]) * 1000
    for path in PATHS[1:]:
        overhead = (medians[path] - medians["direct"]) * 1000
        figures[f"overhead_median[path={path}]"] = overhead
        out(f"overhead_median[path={path}] {overhead:.0f} ms")
    floor = figures["overhead_median[path=floor]"]
    for path in ("keel", "keel_longpoll"):
        ratio = figures[f"overhead_median[path={path}]"] / floor if floor > 0 else float("inf")
        figures[f"overhead_ratio[path={path}]"] = ratio
        out(f"overhead_ratio[path={path}] {ratio:.2f} x the floor's (goal <= 1)")
    cpu_lines(out, figures, "cpu_ms_per_call[{}]", cpu)
    return figures


def max_tokens(prompt: Prompt) -> int | None:
    """The prompt's ``maxTokens``."""
    return prompt.config.inference.maxTokens if prompt.config.inference else None


async def throughput(
    paths: Paths, prompt: Prompt, concurrency: int, rounds: int, out: Out
) -> dict[str, float]:
    """Tokens per second of ``concurrency`` calls at once on each path, over ``rounds``."""
    warm = await paths.call("direct", prompt)
    usage = warm.completion_tokens is not None
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    walls: dict[str, list[float]] = {path: [] for path in PATHS}
    cpu: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    for index in range(rounds):
        for path in rotated(PATHS, index):
            batch = await timed(paths, path, prompt, concurrency)
            tokens = 0
            for answer in batch.answers:
                if path.startswith("keel") and not usage:
                    assert answer.text == warm.text, (path, answer.text, warm.text)
                    tokens += warm.tokens()
                else:
                    tokens += answer.tokens()
            rates[path].append(tokens / batch.wall)
            walls[path].append(batch.wall)
            cpu[path].append(batch.cpu)
    source = (
        "the server's usage.completion_tokens"
        if usage
        else "streamed chunks carrying text (the server's stream has no usage); a Keel call "
        "counts the direct warm-up call's, its text being the same"
    )
    out(
        f"# concurrency: {concurrency} calls at once per path, {rounds} rounds, prompt "
        f"{prompt.text!r}, max_tokens {max_tokens(prompt)}, {warm.tokens()} tokens per answer"
    )
    out(f"# tokens counted from {source}")
    figures: dict[str, float] = {}
    label = f"sessions={concurrency}"
    for path in PATHS:
        spread(out, figures, f"tokens_per_s_*[path={path},{label}]", rates[path], "tok/s")
        median_wall = statistics.median(walls[path])
        figures[f"batch_s_median[path={path},{label}]"] = median_wall
        out(f"batch_s_median[path={path},{label}] {median_wall:.2f} s")
    direct = figures[f"tokens_per_s_median[path=direct,{label}]"]
    for path in PATHS[1:]:
        ratio = figures[f"tokens_per_s_median[path={path},{label}]"] / direct
        paired = statistics.median(r / d for r, d in zip(rates[path], rates["direct"], strict=True))
        figures[f"tokens_per_s_ratio[path={path},{label}]"] = ratio
        figures[f"tokens_per_s_ratio_rounds[path={path},{label}]"] = paired
        goal = " (goal >= 0.95)" if path == "keel" else ""
        out(f"tokens_per_s_ratio[path={path},{label}] {ratio:.3f} x direct's{goal}")
        out(f"tokens_per_s_ratio_rounds[path={path},{label}] {paired:.3f} (median per round)")
    cpu_lines(out, figures, f"cpu_ms_per_batch[{{}},{label}]", cpu)
    return figures


def pin_all(pids: dict[str, int]) -> str:
    """The llama server on the last CPU, the other processes on the others; what was done."""
    cpus = sorted(os.sched_getaffinity(0))
    for name, pid in pids.items():
        pin(pid, {cpus[-1]} if name == "llama" else set(cpus[:-1]))
    return f"# pinned: llama on CPU {cpus[-1]}, this process and the dev server on {cpus[:-1]}"


async def run(
    *,
    calls: int = 20,
    max_tokens: int = 32,
    prompt: str = "Reply with one word: hello",
    concurrency: int = 8,
    rounds: int = 5,
    concurrent_max_tokens: int = 128,
    story: str = "Name three colors and say why you like each.",
    profile_calls: int = 0,
    pinned: bool = False,
    out: Out = print,
) -> dict[str, float]:
    """Every figure, printed with ``out``; returned by name (``figure[labels]``)."""
    # Enough threads for every path's blocking calls at once (the default is cores + 4).
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor(4 * concurrency + 8)
    loop.set_default_executor(threads)
    figures: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, LlamaServer(Path(tmp) / "server.log") as server:
            os.environ["OPENAI_BASE_URL"] = server.base_url
            os.environ["NO_PROXY"] = "127.0.0.1,localhost"
            provider = OpenAIProvider(MODEL.removeprefix("openai:"), os.environ)
            short = Prompt.build(provider, prompt, max_tokens)
            long = Prompt.build(provider, story, concurrent_max_tokens)
            async with dev_server() as env:
                store = open_store(str(Path(tmp) / "store"))
                suffix = uuid.uuid4().hex[:8]
                keel = KeelClient(env.client, f"bench-{suffix}", store)
                floor = plain_client(env.client)
                floor_queue = f"floor-{suffix}"
                async with (
                    build_worker(env.client, keel.task_queue, [], store=store),
                    floor_worker(floor, floor_queue),
                ):
                    port = env.client.service_client.config.target_host.rsplit(":", 1)[1]
                    pids = {
                        "python": os.getpid(),
                        "temporal": child_pid("temporal", port),
                        "llama": server.process.pid if server.process else 0,
                    }
                    paths = Paths(provider.url, keel, floor, floor_queue, pids)
                    if pinned:
                        out(pin_all(pids))
                    if calls:
                        figures.update(await latencies(paths, short, calls, out))
                    if rounds and concurrency:
                        figures.update(await throughput(paths, long, concurrency, rounds, out))
                    if profile_calls:
                        figures.update(
                            await profile(
                                paths,
                                short,
                                profile_calls,
                                out,
                                batch=long,
                                concurrency=concurrency,
                            )
                        )
    finally:
        loop.set_default_executor(ThreadPoolExecutor())
        threads.shutdown(wait=False)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="latency calls per path")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt", default="Reply with one word: hello")
    parser.add_argument("--concurrency", type=int, default=8, help="calls at once (0: none)")
    parser.add_argument("--rounds", type=int, default=5, help="concurrency rounds (0: none)")
    parser.add_argument("--concurrent-max-tokens", type=int, default=128)
    parser.add_argument("--story", default="Name three colors and say why you like each.")
    parser.add_argument("--profile", type=int, default=0, help="calls to time stage by stage")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the llama server on the last CPU, this process and the dev server on the others",
    )
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        raise SystemExit(reason)
    asyncio.run(
        run(
            calls=args.calls,
            max_tokens=args.max_tokens,
            prompt=args.prompt,
            concurrency=args.concurrency,
            rounds=args.rounds,
            concurrent_max_tokens=args.concurrent_max_tokens,
            story=args.story,
            profile_calls=args.profile,
            pinned=args.pin,
        )
    )


if __name__ == "__main__":
    main()
