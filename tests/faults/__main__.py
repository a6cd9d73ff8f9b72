"""Run every kill point and a seeded random series; print one ``figure value unit`` per line.

Usage::

    python -m tests.faults [--random N] [--seed S] [--parallel P] [--only POINT ...]
                           [--compare] [--standby]

Uses the Temporal at ``TEMPORAL_ADDRESS`` when set, else starts a dev server (in memory).
``--parallel 1`` (the default) runs one scenario at a time, so figures are not skewed by
other scenarios' workers starting on the same cores. ``--compare`` runs each kill point a
second time, right after the first, with the timeouts Keel had before issue 23 (a 10 s heartbeat
timeout and a 10 s sticky queue); those figures are tagged ``legacy``. ``--standby`` starts
each replacement worker before the kill and lets it poll from the kill on, so ``resume_s`` is
the time Temporal takes to notice the dead worker and hand its work over, without a process's
start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client

from keel.worker.payloads import DATA_CONVERTER
from tests.faults.harness import KILL_POINTS, Outcome, run_all
from tests.helpers.temporal import dev_server


def summary(outcomes: list[Outcome]) -> list[str]:
    legacy = [o for o in outcomes if o.legacy and o.resume_s is not None and o.error is None]
    outcomes = [o for o in outcomes if not o.legacy]
    survived = [o for o in outcomes if o.error is None]
    points = sum(o.name in KILL_POINTS for o in outcomes)
    randoms = len(outcomes) - points
    points_ok = sum(o.name in KILL_POINTS for o in survived)
    randoms_ok = len(survived) - points_ok
    lines = [
        f"fault_kill_points_survived {points_ok}/{points} points",
        f"fault_random_kills_survived {randoms_ok}/{randoms} kills",
    ]
    resumes = [o.resume_s for o in survived if o.resume_s is not None]
    if resumes:
        lines.append(f"fault_resume_s_max {max(resumes):.2f} s")
        lines.append(f"fault_resume_s_median {statistics.median(resumes):.2f} s")
    if legacy:
        old = [o.resume_s for o in legacy if o.resume_s is not None]
        lines.append(f"fault_resume_s_max[legacy] {max(old):.2f} s")
        lines.append(f"fault_resume_s_median[legacy] {statistics.median(old):.2f} s")
        pairs = {o.name: o.resume_s for o in survived if o.resume_s is not None}
        ratios = [pairs[o.name] / o.resume_s for o in legacy if o.name in pairs and o.resume_s]
        if ratios:
            ratio = statistics.median(ratios)
            lines.append(f"fault_resume_ratio_new_to_legacy_median {ratio:.2f} x")
    return lines


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--random", type=int, default=6, help="random kills (default 6)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=list(KILL_POINTS), default=None)
    parser.add_argument(
        "--compare", action="store_true", help="also run each kill point with legacy timeouts"
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="start each new worker before the kill; it polls from the kill on",
    )
    args = parser.parse_args()
    address = os.environ.get("TEMPORAL_ADDRESS")
    async with contextlib.AsyncExitStack() as stack:
        if address:
            client = await Client.connect(address, data_converter=DATA_CONVERTER)
        else:
            client = (await stack.enter_async_context(dev_server())).client
            address = client.service_client.config.target_host
        with tempfile.TemporaryDirectory() as tmp:
            outcomes = await run_all(
                client,
                address,
                Path(tmp),
                kill_points=args.only,
                random_count=args.random,
                seed=args.seed,
                parallel=args.parallel,
                compare=args.compare,
                standby=args.standby,
            )
    failed = 0
    for outcome in outcomes:
        if outcome.name not in KILL_POINTS and outcome.notes:
            print(f"# {outcome.name}: {outcome.notes[0]}")
        for line in outcome.figures():
            print(line)
        if outcome.error:
            failed += 1
            tag = " (legacy)" if outcome.legacy else ""
            print(f"FAILED {outcome.name}{tag}: {outcome.error}", file=sys.stderr)
            for note in outcome.notes:
                print(note, file=sys.stderr)
    for line in summary(outcomes):
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
