"""The peer: another Temporal agent integration, measured beside Keel and the floor.

``--peer strands`` adds the official Strands plugin (``temporalio-strands-agents``). It does
not share Keel's environment (it pins ``mcp<2``, Keel needs ``mcp>=2.3``), so its worker runs
in a virtual environment of its own, made by :func:`ensure_venv` on first use with
``python -m venv`` and ``pip install``, and kept for later runs (default
``~/.cache/keel-bench/strands-venv``; ``--peer-venv`` moves it). temporalio is pinned there to
the runner's own version, so both sides run the same SDK. The peer's worker
(``tests.benchmarks.peer_strands``) runs in that venv, against the same dev server.

This module is imported on both sides (the runner's environment and the peer's venv), so it
uses the standard library only.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Temporal's default history size limit (limit.historySize.error): a run is terminated there.
HISTORY_LIMIT_BYTES = 50 * 1024 * 1024
# Written into a venv this module made, with the requirements it was made for.
MARKER = "keel-bench-peer.txt"


@dataclass(frozen=True)
class Peer:
    """One peer integration: what to install, which worker to run, what to look for."""

    name: str
    requirements: tuple[str, ...]
    module: str
    workflow: str
    model_activity: str
    probe: str  # a module the venv must import
    versions_of: tuple[str, ...]
    args: tuple[str, ...] = ()  # after ``python -m module``

    def entry(self, python: Path) -> list[str]:
        """The command of the peer's worker, before ``--address`` and the rest."""
        return [str(python), "-m", self.module, *self.args]


STRANDS = Peer(
    name="strands",
    # strands-agents pinned too (the plugin asks for >=1.51.0): the same peer every run.
    requirements=("temporalio-strands-agents==0.1.0", "strands-agents==1.62.0"),
    module="tests.benchmarks.peer_strands",
    workflow="StrandsLoop",
    model_activity="invoke_model",
    probe="temporalio.strands_agents",
    versions_of=("temporalio-strands-agents", "strands-agents", "temporalio", "pydantic"),
)
PEERS = {STRANDS.name: STRANDS}


def default_venv(peer: Peer) -> Path:
    """``$XDG_CACHE_HOME/keel-bench/NAME-venv`` (``~/.cache`` without it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "keel-bench" / f"{peer.name}-venv"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(peer: Peer, venv: Path, temporalio_version: str) -> tuple[Path, str]:
    """The peer's venv, made on first use; its python and a line saying what it holds.

    A venv this function made before for the same requirements is reused as it is. One it
    made for other requirements is made again. Any other directory at ``venv`` is left
    alone, with an error.

    Raises:
        RuntimeError: ``venv`` exists and is not one of ours, or venv or pip failed (with
            the tail of pip's output).
    """
    requirements = [*peer.requirements, f"temporalio=={temporalio_version}"]
    wanted = "\n".join(requirements) + "\n"
    marker = venv / MARKER
    python = venv_python(venv)
    started = time.monotonic()
    if marker.exists() and marker.read_text() == wanted and python.exists():
        made = "reused"
    else:
        if venv.exists() and any(venv.iterdir()):
            if not marker.exists():
                raise RuntimeError(
                    f"{venv} exists and was not made by the benchmark (no {MARKER}); "
                    "remove it or pass another --peer-venv"
                )
            shutil.rmtree(venv)
        venv.parent.mkdir(parents=True, exist_ok=True)
        _check([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        _check([*pip, *requirements], f"pip install {' '.join(requirements)}")
        marker.write_text(wanted)
        made = f"made in {time.monotonic() - started:.0f} s"
    probe = (
        f"import importlib, importlib.metadata as m\nimportlib.import_module({peer.probe!r})\n"
        f"print(', '.join(f'{{n}} {{m.version(n)}}' for n in {list(peer.versions_of)!r}))\n"
    )
    done = _check([str(python), "-c", probe], f"the {peer.name} venv's import check")
    return python, f"{peer.name} venv at {venv} ({made}): {done.stdout.strip()}"


def _check(command: list[str], what: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done


def longest_turn(fixed: float, per_cycle: dict[int, float], limit: float) -> float | None:
    """Cycles of one turn whose history reaches ``limit`` bytes, extrapolated.

    A turn of N cycles has ``fixed + N * p(N)`` bytes of history, where ``p(N)`` is the
    measured history per cycle. A loop that sends the whole conversation every call grows
    ``p`` linearly with N (its history is quadratic); one that does not keeps it flat. So
    ``p(N) = a + b * N``, fitted through the two largest cycle counts measured
    (``b = (p(N2) - p(N1)) / (N2 - N1)``, ``a = p(N2) - b * N2``; ``b`` taken as 0 if
    negative), and the turn reaches the limit at the positive root of
    ``b * N**2 + a * N + fixed = limit``. None with fewer than two counts.
    """
    if len(per_cycle) < 2:
        return None
    n1, n2 = sorted(per_cycle)[-2:]
    slope = max(0.0, (per_cycle[n2] - per_cycle[n1]) / (n2 - n1))
    base = per_cycle[n2] - slope * n2
    room = limit - fixed
    if slope == 0:
        return room / base if base > 0 else None
    return (-base + math.sqrt(base * base + 4 * slope * room)) / (2 * slope)
