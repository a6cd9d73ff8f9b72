"""The order in which xdist hands test files to its processes: the longest first.

``--dist loadfile`` gives each of the four processes a file at a time, in collection order
(``--no-loadscope-reorder``; by default xdist sorts the files by their number of tests, which
sends the few long files with few tests, a fresh clone's install or the CLI walkthroughs, to
the end of the run, where they ran alone for 35-50 s while the other processes had finished).
The known long files come first, longest first; every other file after them, by its number
of tests (about 0.9 s each, counted as at most 20 s: a file of many quick tests, such as the
202 replays of recorded histories in 10 s, is not a long one). The seconds are the mean of
two whole runs on 2 cores (``--durations=0``), and a later run's for the files made shorter
since (the approval races, the history loop, the real model's context test; the crash-resume
test, 19 s, left the table); a figure gone stale only costs time, never a result.
"""

from __future__ import annotations

from collections import Counter

import pytest

SECONDS_PER_TEST = 0.9
OTHER_FILE_AT_MOST_S = 20.0

LONG_FILES: dict[str, float] = {
    "tests/workflows/test_hostile_input.py": 140,
    "tests/worker/cli/test_cli_hints.py": 110,
    "tests/real_model/test_real_model.py": 79,
    "tests/workflows/test_approvals.py": 78,
    "tests/worker/cli/test_cli_failures.py": 78,
    "tests/test_docs.py": 71,
    "tests/worker/test_codec_web_ui.py": 67,
    "tests/benchmarks_ci/test_runner.py": 65,
    "tests/workflows/test_long_running.py": 63,
    "tests/worker/cli/test_cli_temporal_truth.py": 63,
    "tests/workflows/test_injection.py": 62,
    "tests/faults/test_effect_kills.py": 58,
    "tests/worker/cli/test_cli.py": 51,
    "tests/worker/cli/test_cli_watch.py": 51,
    "tests/worker/cli/test_cli_planted.py": 47,
    "tests/test_fresh_machine.py": 47,
    "tests/workflows/test_standing_bounds.py": 41,
    "tests/worker/cli/test_cli_newcomer_folder.py": 40,
    "tests/worker/test_deploy_versions.py": 38,
    "tests/activities/test_mcp.py": 34,
    "tests/workflows/test_questions.py": 34,
    "tests/faults/test_kill_points.py": 34,
    "tests/test_examples.py": 33,
    "tests/worker/test_inflight.py": 32,
    "tests/workflows/test_mcp_sessions.py": 32,
    "tests/worker/cli/test_cli_mcp.py": 32,
    "tests/worker/cli/test_cli_replay.py": 32,
    "tests/workflows/test_escalation.py": 29,
    "tests/workflows/test_purity.py": 29,
    "tests/workflows/test_client_tools.py": 28,
    "tests/worker/client/test_model_text.py": 26,
    "tests/test_readme.py": 24,
    "tests/workflows/test_sub_agent_trust.py": 24,
    "tests/worker/cli/test_cli_two_terminals.py": 23,
    "tests/benchmarks_ci/test_heartbeats.py": 23,
}


def file_of(item: pytest.Item) -> str:
    """The test's file, as the node id names it (``tests/...``)."""
    return item.nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place by their file's expected seconds, longest file first.

    The sort is stable: the tests of a file stay together, in their order.
    """
    tests = Counter(file_of(item) for item in items)

    def seconds(item: pytest.Item) -> float:
        path = file_of(item)
        guess = min(SECONDS_PER_TEST * tests[path], OTHER_FILE_AT_MOST_S)
        return LONG_FILES.get(path, guess)

    items.sort(key=lambda item: -seconds(item))
