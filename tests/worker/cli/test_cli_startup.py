"""``keel --help``, ``keel --version`` and argument errors answer without importing the worker.

Building the parser imports no Temporal, worker, model provider, MCP or web server: each
command imports what it runs when it runs (see ``keel.worker.cli.flags``). Measured start-up
times are in docs/performance.md, "CLI start-up".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys

import pytest

import keel
from keel.worker.cli import flags, schedules
from keel.worker.cli.main import build_parser
from keel.worker.client.schedules import OVERLAP_POLICIES
from keel.worker.ui.serving import DEFAULT_HOST, DEFAULT_PORT
from tests.helpers.cli import ROOT, keel_env

# What none of them may import: Temporal, the worker, the model providers, MCP, boto3, the
# web server, the workflow and activity code.
HEAVY = (
    "temporalio",
    "boto3",
    "botocore",
    "mcp",
    "starlette",
    "uvicorn",
    "pydantic",
    "keel.activities",
    "keel.workflows",
    "keel.worker.process",
    "keel.worker.client",
    "keel.worker.server",
)
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|(\s*)(\S+)$", re.M)


def imported(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``keel ARGS`` under ``-X importtime``; its result and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "keel.worker.cli", *args],
        env=keel_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, {name for _, name in IMPORTED.findall(done.stderr)}


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def commands() -> list[list[str]]:
    """Every command and subcommand of ``keel``, as words: ``["run"]``, ``["schedule", "list"]``."""
    found: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.append(words)
            return
        for name, sub in subs[0].choices.items():
            walk(sub, [*words, name])

    walk(build_parser(), [])
    return found


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["run", "--modle", "scripted:x.json", "hi"],  # a mistyped flag
        ["show"],  # a missing argument
        ["sessions", "--limit", "many"],  # a value of the wrong type
        ["show", "bad id"],  # a session id outside the allowed characters
        ["frobnicate"],  # no such command
    ],
    ids=["help", "version", "mistyped-flag", "missing-argument", "bad-value", "bad-id", "unknown"],
)
def test_help_version_and_argument_errors_import_nothing_heavy(args: list[str]) -> None:
    done, modules = imported(*args)
    assert "keel.worker.cli.main" in modules, done.stderr[-2000:]  # the probe sees imports
    assert heavy(modules) == [], heavy(modules)
    if args[0] in ("--help", "--version"):
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        assert done.returncode == 2
        [said] = [line for line in done.stderr.splitlines() if not line.startswith("import time")]
        assert said.startswith("keel") and "see `keel" in said, said


def test_every_commands_help_imports_nothing_heavy() -> None:
    every = commands()
    assert ["run"] in every and ["schedule", "create"] in every and ["dev"] in every
    for words in every:
        done, modules = imported(*words, "--help")
        assert done.returncode == 0, (words, done.stderr[-2000:])
        assert heavy(modules) == [], (words, heavy(modules))


def test_a_command_that_runs_imports_what_it_needs() -> None:
    """The probe itself: a command that runs (here one Temporal refuses) does import it."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "keel.worker.cli", "sessions"],
        env=keel_env(TEMPORAL_ADDRESS="127.0.0.1:1"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "cannot reach Temporal at 127.0.0.1:1" in done.stderr
    assert "temporalio.client" in {name for _, name in IMPORTED.findall(done.stderr)}


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "keel.worker.cli", "--version"],
        env=keel_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == f"keel {importlib.metadata.version('keel')}\n"
    assert keel.__version__ == importlib.metadata.version("keel")


def test_the_parsers_copies_agree_with_what_the_commands_use() -> None:
    """Values the parser holds itself, so as not to import the modules that define them."""
    assert set(schedules.OVERLAPS) == set(OVERLAP_POLICIES)
    assert (flags.UI_HOST, flags.UI_PORT) == (DEFAULT_HOST, DEFAULT_PORT)
