"""Running a command line a person copied, with ``keel`` stubbed out: what bash hands it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path


def run_copied(line: str, where: Path) -> list[str]:
    """Run ``line`` with ``bash -c`` in ``where``, ``keel`` a function that records its argv.

    Returns:
        The arguments bash passed to ``keel``. Anything else the line runs (a ``$(...)``
        that was not quoted) runs too, in ``where``: a test then looks for its traces.
    """
    record = where / "argv"
    stub = f"keel() {{ printf '%s\\0' \"$@\" > {shlex.quote(str(record))}; }}\n"
    done = subprocess.run(
        ["bash", "-c", stub + line], cwd=where, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0, (line, done.stderr)
    return record.read_text().split("\0")[:-1]
