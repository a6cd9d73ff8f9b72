"""The parser class of every ``keel`` command, and the arguments several commands share.

Each command module adds its commands through its ``add_parser(subparsers)``; ``keel``'s
``build_parser`` (``main.py``) assembles them. ``session_id`` checks a SESSION argument;
``waiting_flags``, ``mcp_flag`` and ``key_flag`` add the flags of the commands that wait
like ``keel run``, that start a worker, or that sign. ``run_inputs.add_session_flags`` adds
the flags of a new session.
"""

from __future__ import annotations

import argparse
from typing import NoReturn, TypeAlias

from keel.worker.cli.console import EXIT_INVALID
from keel.worker.shell import session_id_problem


class Parser(argparse.ArgumentParser):
    """An argument parser that tells a mistake in one line: what is wrong, where to look."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: <message> (see `<prog> --help`)`` on stderr and exit 2."""
        self.exit(EXIT_INVALID, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


# What ``Parser.add_subparsers`` returns: each command module's ``add_parser(subparsers)``
# adds its commands to it (as ``Parser``s too).
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def session_id(value: str) -> str:
    """A SESSION argument (``--session`` too): refused, naming the rule, unless a session id."""
    problem = session_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def waiting_flags(cmd: argparse.ArgumentParser) -> None:
    """Flags of the commands that wait for a turn like ``keel run``."""
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.add_argument(
        "--progress",
        action="store_true",
        help="report model calls and tool runs on stderr (default when stderr is a terminal)",
    )
    cmd.add_argument(
        "--no-input",
        action="store_true",
        help="never ask for approval on the terminal; exit 3 when the turn waits",
    )


def mcp_flag(cmd: argparse.ArgumentParser) -> None:
    """``--mcp NAME=COMMAND`` or ``--mcp NAME=URL``, repeatable: the worker's MCP servers."""
    cmd.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=COMMAND|URL",
        help="an MCP server for the worker: a stdio command or a streamable-HTTP URL "
        "(repeatable; its tools keep their names, --tools mcp:NAME limits a session to it)",
    )


def key_flag(cmd: argparse.ArgumentParser) -> None:
    """``--key FILE``: the approver's private key, to sign with."""
    cmd.add_argument(
        "--key",
        metavar="FILE",
        help="sign with this private key (from `keel keygen`; default: KEEL_APPROVER_KEY)",
    )
