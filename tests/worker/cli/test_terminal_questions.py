"""Questions asked one after another on a terminal each get their own line of input.

A denial asks "approve? [y/N]" and then "reason (optional)": the second question must be read
even when the thread that read the first has not ended yet (it hung ``keel run`` under load).
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from keel.worker.cli.console import ask


async def test_two_questions_in_a_row_each_read_their_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for round_ in range(200):
        read, write = os.pipe()
        os.write(write, f"n\nreason {round_}\n".encode())
        with os.fdopen(read, "r") as stdin:
            monkeypatch.setattr(sys, "stdin", stdin)
            first = await asyncio.wait_for(ask(""), 5)
            second = await asyncio.wait_for(ask(""), 5)
        os.close(write)
        assert (first, second) == ("n", f"reason {round_}")
