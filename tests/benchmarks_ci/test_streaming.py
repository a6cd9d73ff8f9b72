"""The streaming benchmark works, in a tiny version: no timed assertions.

One short call per route: the stream endpoint delivers every character in order, the
heartbeat fallback delivers only characters in order, and every figure is printed.
"""

from __future__ import annotations

import math

from tests.benchmarks.streaming import PATHS, run


async def test_streaming_benchmark_prints_every_figure_and_the_endpoint_misses_nothing() -> None:
    lines: list[str] = []
    figures = await run([40.0], seconds=2.0, rounds=1, out=lines.append)

    printed = [line.split(" ")[0] for line in lines if not line.startswith("# ")]
    names = ["model_rate", "completeness", "in_order", "latency_p50", "latency_p99"]
    names += ["heartbeat_rpcs_per_call", "reader_describe_rpcs_per_call"]
    expected = [f"{n}[rate=40,path={p}]" for n in names for p in PATHS]
    expected += [f"{n}_ratio[rate=40]" for n in ("completeness", "latency_p50", "latency_p99")]
    assert sorted(printed) == sorted(expected), lines
    for name in expected:
        assert math.isfinite(figures[name]), (name, lines)
    assert figures["completeness[rate=40,path=endpoint]"] == 1.0, lines
    assert figures["in_order[rate=40,path=endpoint]"] == 1.0, lines
    assert figures["in_order[rate=40,path=heartbeats]"] == 1.0, lines
    # the endpoint's reader stops asking Temporal once it reads from the worker
    assert (
        figures["reader_describe_rpcs_per_call[rate=40,path=endpoint]"]
        < figures["reader_describe_rpcs_per_call[rate=40,path=heartbeats]"]
    ), lines
