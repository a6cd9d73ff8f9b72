"""The CLI refuses a value over its limit before it sends anything: exit 2, naming the limit.

The session's validators refuse the same (``tests/workflows/test_limits.py``); the CLI says so
first, in one line, without a session, a server round trip or a traceback.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.cli import keel


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_oversize_value_exits_2_naming_its_limit(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    long_test = 'path startswith "' + "d" * 600 + '"'
    many = " and ".join(f"n == {k}" for k in range(11))
    cases = [
        (
            ["approve", "s1", "i1", "--always-when", long_test],
            "always_when test 1 (path startswith ...) is 645 bytes, over the limit of 512 bytes",
        ),
        (
            ["approve", "s1", "i1", "--always-when", many],
            "always_when is 11 tests, over the limit of 10 tests",
        ),
        (
            ["deny", "s1", "i1", "--reason", "r" * 3_000],
            "decision reason is 3,000 bytes, over the limit of 2,000 bytes",
        ),
        (
            ["approve", "s1", "i1", "--approver", "a" * 300],
            "approver is 300 bytes, over the limit of 200 bytes",
        ),
        (["respond", "s1", "i1", "v" * 5_000], "answer is 5,002 bytes, over the limit of 4,000"),
        (["steer", "s1", "s" * 5_000], "steering text is 5,000 bytes, over the limit of 4,000"),
        (
            ["cancel", "s1", "--reason", "c" * 3_000],
            "cancel reason is 3,000 bytes, over the limit of 2,000 bytes",
        ),
        (
            ["run", "--session", "s1", "--model", "scripted:x.json", *["p" * 100_000] * 3],
            "prompt is 300,0",
        ),
    ]
    for args, expected in cases:
        done = keel(*args, env=server_env, cwd=tmp_path)
        shown = [a[:40] for a in args]
        assert done.returncode == 2, (shown, done.stderr)
        line = one_line(done)
        assert line.startswith("keel: ") and expected in line, (shown, line)
