"""The real-model benchmark works, in a tiny version: no timed assertions.

One call per path, one round of two calls at once, one profiled call per path: every figure
is printed and finite, every path answered the same text, and the profile found the stages
of each path. Skipped, saying why, without the real-model lane's packages (``bash
.ci/real-model``); failed instead with ``KEEL_REQUIRE_REAL_MODEL=1``, as the lane is.
"""

from __future__ import annotations

import math
import os

import pytest

from tests.benchmarks.real_model import run
from tests.benchmarks.real_model_paths import PATHS
from tests.real_model.llama_server import missing

REQUIRE_ENV = "KEEL_REQUIRE_REAL_MODEL"


@pytest.mark.skipif(
    os.environ.get("KEEL_SLOW_TESTS") != "1",
    reason="about 6 s alone, but over 120 s under the full suite's four processes (it shares "
    "2 cores with the other real-model tests' servers): KEEL_SLOW_TESTS=1 runs it",
)
async def test_real_model_benchmark_prints_every_figure_for_every_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = missing()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the real-model lane cannot run: {reason}")
        pytest.skip(f"real-model lane skipped: {reason}")
    # run() points the provider at its server through these: restored after the test
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    lines: list[str] = []
    prompt = "Reply with one word: hello"
    figures = await run(
        calls=1,
        concurrency=2,
        rounds=1,
        story=prompt,
        concurrent_max_tokens=32,
        profile_calls=1,
        out=lines.append,
    )

    printed = [line.split(" ")[0] for line in lines if not line.startswith("# ")]
    assert sorted(printed) == sorted(figures), lines
    for name, value in figures.items():
        assert math.isfinite(value), (name, lines)
    assert any("the same every call, on every path" in line for line in lines), lines
    label = "sessions=2"
    for path in PATHS:
        assert figures[f"latency_median[path={path}]"] > 0, lines
        assert figures[f"tokens_per_s_median[path={path},{label}]"] > 0, lines
        assert figures[f"profile_ms[path={path},stage=http]"] > 0, lines
        assert f"profile_batch_ms[path={path},stage=wall,{label}]" in figures, lines
    for path in PATHS[1:]:
        assert f"overhead_median[path={path}]" in figures, lines
        assert f"tokens_per_s_ratio[path={path},{label}]" in figures, lines
    for path in ("floor", "keel", "keel_longpoll"):
        for stage in ("wft1_run", "activity_wait", "to_http", "wft2_run", "seen"):
            assert f"profile_ms[path={path},stage={stage}]" in figures, (path, stage, lines)
    assert "profile_ms[path=keel,stage=store]" in figures, lines
    assert figures["profile_count[path=keel_longpoll,what=turn_queries]"] >= 1, lines
