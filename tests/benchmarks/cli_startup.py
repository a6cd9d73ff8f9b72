"""How long the ``keel`` command takes to answer: median of N runs of each command.

Runs, as ``python3 -m keel.worker.cli ...`` with the code of ``--code`` (default: this
checkout) first on ``PYTHONPATH``:

- ``--help``, ``--version`` and a mistyped flag (no server involved);
- ``show SESSION`` against a dev server (``temporal server start-dev --headless``) with a
  ``keel worker`` of the same code, ``TEMPORAL_ADDRESS`` set;
- ``sessions`` and ``show SESSION`` embedded: in a folder whose ``.keel/`` holds one session,
  so the command starts the dev server on it.

Usage::

    python3 -m tests.benchmarks.cli_startup [--code DIR] [--runs 5]

Compare two versions by giving each its code: ``git archive COMMIT | tar -x -C DIR``.
docs/performance.md, "CLI start-up", has the figures (measured with ``hyperfine``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from keel.worker.server.devserver import find_temporal_cli, free_ports
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, write_script


def _timed(args: list[str], env: dict[str, str], cwd: Path, runs: int) -> tuple[float, int]:
    """The median wall time of ``keel ARGS`` over ``runs`` runs (after one warm-up), and its
    exit code."""
    times, code = [], 0
    for n in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "keel.worker.cli", *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if n:
            times.append(time.perf_counter() - start)
        code = done.returncode
    return statistics.median(times), code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    code = args.code.resolve()
    base = {**keel_env(), "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
    port = free_ports(1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = write_script(folder / "s.json", [respond(text("hi"))])
        server = subprocess.Popen(
            [find_temporal_cli() or "temporal", "server", "start-dev", "--headless"]
            + ["--port", str(port), "--log-level", "error"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        remote = {**base, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}", "KEEL_HOME": tmp}
        worker = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
            env=remote,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(4)
            embedded = folder / "embedded"
            embedded.mkdir()
            for env, cwd in ((remote, folder), (base, embedded)):
                started = subprocess.run(
                    [sys.executable, "-m", "keel.worker.cli", "run", "--session", "bench"]
                    + ["--model", model, "hello"],
                    env=env,
                    cwd=cwd,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert started.returncode == 0, started.stderr
            commands = [
                ("keel --help", ["--help"], base, folder),
                ("keel --version", ["--version"], base, folder),
                ("keel run --modle x hi", ["run", "--modle", "x", "hi"], base, folder),
                ("TEMPORAL_ADDRESS=... keel show SESSION", ["show", "bench"], remote, folder),
                ("keel sessions (embedded)", ["sessions"], base, embedded),
                ("keel show SESSION (embedded)", ["show", "bench"], base, embedded),
            ]
            figures = {}
            for name, words, env, cwd in commands:
                median, exit_code = _timed(words, env, cwd, args.runs)
                figures[name] = {"median_ms": round(median * 1000), "exit": exit_code}
                print(f"{median * 1000:8.0f} ms  exit {exit_code}  {name}", flush=True)
            print(json.dumps({"code": str(code), "runs": args.runs, "figures": figures}))
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
