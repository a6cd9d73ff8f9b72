"""The parser class of every ``keel`` command, and the arguments several commands share.

Each command module adds its commands through its ``add_parser(subparsers)``; ``keel``'s
``build_parser`` (``main.py``) assembles them. ``session_id`` checks a SESSION argument;
``waiting_flags``, ``mcp_flag`` and ``key_flag`` add the flags of the commands that wait
like ``keel run``, that start a worker, or that sign; ``add_session_flags`` the flags of a
new session.

Building the parser imports nothing heavy (no Temporal, worker, model providers, MCP):
``keel --help``, ``keel --version`` and a mistyped flag answer at once. What a command needs
is imported by the function that runs it.
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


# Where Keel's web page listens by default (``keel ui``, ``keel dev``): the values of
# ``keel.worker.ui.serving``, which imports the web server.
UI_HOST = "127.0.0.1"
UI_PORT = 8234


# ``--tools``: how a worker's (and a new session's) tool modules are named (docs/tools.md).
TOOLS_HELP = (
    "tool modules, comma separated: names importable from this folder (mytools) or files "
    "(./mytools.py)"
)


# What ``Parser.add_subparsers`` returns: each command module's ``add_parser(subparsers)``
# adds its commands to it (as ``Parser``s too).
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def session_id(value: str) -> str:
    """A SESSION argument (``--session`` too): refused, naming the rule, unless a session id."""
    problem = session_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def port(value: str) -> int:
    """A TCP port argument: a number from 1 to 65535."""
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (a number from 1 to 65535)")
    return int(value)


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


def mcp_flag(cmd: argparse.ArgumentParser, *, embedded: bool = False) -> None:
    """``--mcp NAME=COMMAND`` or ``--mcp NAME=URL``, repeatable: the worker's MCP servers.

    ``embedded``: the command has a worker only when it embeds the server (``keel approve``
    and the other commands that go on with a turn), for a session that uses MCP servers.
    """
    text = (
        "an MCP server for the worker this command runs when it embeds Temporal, for a "
        "session that uses one (repeatable; as given to keel run)"
        if embedded
        else "an MCP server for the worker: a stdio command or a streamable-HTTP URL "
        "(repeatable; its tools keep their names, --tools mcp:NAME limits a session to it)"
    )
    cmd.add_argument("--mcp", action="append", default=[], metavar="NAME=COMMAND|URL", help=text)


def key_flag(cmd: argparse.ArgumentParser) -> None:
    """``--key FILE``: the approver's private key, to sign with."""
    cmd.add_argument(
        "--key",
        metavar="FILE",
        help="sign with this private key (from `keel keygen`; default: KEEL_APPROVER_KEY)",
    )


def add_session_flags(cmd: argparse.ArgumentParser) -> None:
    """The flags of a new session's settings: ``keel run``'s, and ``keel schedule create``'s."""
    cmd.add_argument("--model", help="model spec for a new session (default: KEEL_MODEL)")
    cmd.add_argument("--system", help="system prompt for a new session")
    cmd.add_argument("--tools", help=f"{TOOLS_HELP}, and mcp:NAME sources")
    cmd.add_argument(
        "--require-approval",
        metavar="TOOL[,TOOL]",
        help="tools that need approval in a new session",
    )
    cmd.add_argument("--approvers", metavar="ID[,ID]", help="who may decide (default: anyone)")
    cmd.add_argument(
        "--approver-key",
        action="append",
        default=[],
        metavar="NAME=PUBLIC_KEY",
        help="a new session accepts only decisions signed by these approvers' keys "
        "(repeatable; PUBLIC_KEY as `keel keygen` prints it)",
    )
    cmd.add_argument(
        "--effect",
        action="append",
        default=[],
        metavar="TOOL=CLASS",
        help="what running TOOL again does in a new session: read, idempotent or write "
        "(repeatable; over the tool's own declaration and the agent file's effects)",
    )
    cmd.add_argument(
        "--approval-timeout", type=float, metavar="SECONDS", help="deny undecided interrupts after"
    )
    cmd.add_argument(
        "--escalate",
        action="append",
        default=[],
        metavar="SECONDS:ID[,ID]",
        help="an interrupt still undecided after SECONDS may also be decided by these "
        "approvers, who are notified then (repeatable, in increasing SECONDS; replaces the "
        "agent file's escalate)",
    )
    cmd.add_argument(
        "--max-cycles", type=int, metavar="N", help="model calls allowed per turn (default 100)"
    )
    cmd.add_argument(
        "--turn-token-budget",
        type=int,
        metavar="N",
        help="tokens allowed per turn (default 2,000,000)",
    )
    cmd.add_argument("--token-budget", type=int, metavar="N", help="tokens allowed per session")
    cmd.add_argument(
        "--turn-cost-budget",
        type=float,
        metavar="DOLLARS",
        help="US dollars a turn's model calls may cost (needs a price)",
    )
    cmd.add_argument(
        "--cost-budget",
        type=float,
        metavar="DOLLARS",
        help="US dollars a session's model calls may cost (needs a price)",
    )
    cmd.add_argument(
        "--on-budget",
        choices=("ask", "fail"),
        help="a turn at a cap asks a person for more (ask, the default) or fails",
    )
    cmd.add_argument(
        "--model-retry",
        type=float,
        metavar="SECONDS",
        help="how long a model that does not answer is retried before the turn fails (default 600)",
    )
    cmd.add_argument(
        "--heartbeat-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a model call or tool may go unheard from before it is run again "
        "elsewhere (default 30; shorter heartbeats more: more Temporal Cloud Actions)",
    )
    cmd.add_argument(
        "--price",
        metavar="IN:OUT",
        help="the model's price in US dollars per million input and output tokens, e.g. "
        "3:15 (over the workers' price table)",
    )
    cmd.add_argument("--agent", metavar="FILE.toml", help="a new session's settings from a file")
    cmd.add_argument(
        "--output-schema", metavar="FILE", help="JSON Schema file of the turn's structured output"
    )
    cmd.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help="POST a JSON event to URL when an interrupt opens and when a turn ends "
        "(repeatable; replaces the agent file's notify)",
    )
