"""Cost of encryption (``KEEL_ENCRYPTION_KEY``) per cycle: the same session with and without.

    python -m tests.benchmarks.codec_cost [--cycles N] [--repeats R]

One process runs a dev server's client, a worker (``max_cached_workflows=0``, so every
workflow task replays its history and decrypts it again: the worst case) and a local store.
Each run is one turn of N cycles (a model call, then a tool run) of the scripted model. Runs
alternate plain and encrypted, so both see the same machine load; prints the medians of this
process's CPU time and the wall time per cycle, and the difference; then the codec alone on
one payload.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.activities.store import Keyring
from keel.worker.payloads import data_converter
from keel.worker.process.assembly import build_worker
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import dev_server


async def one_run(
    base: Client, keyring: Keyring | None, model: str, root: Path, cached: int
) -> tuple[float, float]:
    """CPU and wall seconds of one turn."""
    client = Client(
        base.service_client, namespace=base.namespace, data_converter=data_converter(keyring)
    )
    store = open_store(str(root / uuid.uuid4().hex), keyring)
    queue = f"codec-{uuid.uuid4().hex[:8]}"
    keel = KeelClient(client, queue, store)
    worker = build_worker(client, queue, [SAMPLE_TOOLS], store=store, max_cached_workflows=cached)
    async with worker:
        config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
        cpu, wall = time.process_time(), time.perf_counter()
        done = await keel.run(f"codec-{uuid.uuid4().hex[:8]}", "go", config=config, timeout_s=300)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert done.status == "completed", done
    return cpu, wall


async def main_async(cycles: int, repeats: int, cached: int) -> None:
    keyring = Keyring.of(os.urandom(32))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        steps = [
            respond(tool_use(f"t{i}", "add", a=i, b=1), stop="tool_use") for i in range(cycles)
        ]
        model = write_script(root / "s.json", [*steps, respond(text("done"))])
        async with dev_server() as env:
            await one_run(env.client, None, model, root, cached)  # warm-up
            await one_run(env.client, keyring, model, root, cached)
            results: dict[str, list[tuple[float, float]]] = {"plain": [], "encrypted": []}
            for _ in range(repeats):
                for name, keys in (("plain", None), ("encrypted", keyring)):
                    results[name].append(await one_run(env.client, keys, model, root, cached))
    per = {}
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs) / cycles * 1e3
        wall = statistics.median(w for _, w in runs) / cycles * 1e3
        per[name] = (cpu, wall)
        print(f"{name:9s} cpu {cpu:7.2f} ms/cycle  wall {wall:7.2f} ms/cycle")
    (pc, pw), (ec, ew) = per["plain"], per["encrypted"]
    print(
        f"encryption: cpu {ec - pc:+.2f} ms/cycle ({(ec / pc - 1) * 100:+.1f}%), "
        f"wall {ew - pw:+.2f} ms/cycle ({(ew / pw - 1) * 100:+.1f}%); "
        f"{cycles} cycles, median of {repeats} runs, max_cached_workflows={cached}"
    )


async def codec_alone(keyring: Keyring, size: int, rounds: int = 2000) -> float:
    """Microseconds to encrypt then decrypt one payload of ``size`` bytes with the codec."""
    from temporalio.api.common.v1 import Payload

    from keel.worker.encryption import EncryptionCodec

    codec = EncryptionCodec(keyring)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=os.urandom(size))
    start = time.perf_counter()
    for _ in range(rounds):
        await codec.decode(await codec.encode([payload]))
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cached", type=int, default=1000, help="max_cached_workflows")
    args = parser.parse_args()
    asyncio.run(main_async(args.cycles, args.repeats, args.cached))
    keyring = Keyring.of(os.urandom(32))
    for size in (1_000, 64_000):
        micros = asyncio.run(codec_alone(keyring, size))
        print(f"codec alone: encrypt + decrypt one {size:,}-byte payload: {micros:.1f} µs")


if __name__ == "__main__":
    main()
