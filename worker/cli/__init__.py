"""The ``keel`` command.

Modules: ``main`` (the parser and the entry point), ``commands`` (what each command does),
``run_inputs`` (what ``keel run`` reads from the command line), ``console`` (what it prints and
asks), ``follow`` (progress and ``keel watch``).
"""

from worker.cli.main import build_parser, main, run_cli

__all__ = ["build_parser", "main", "run_cli"]
