"""The ``keel`` command line: argument parsing and the entry point.

Exit codes: 0 completed, 3 waiting for a human, 1 failed, 2 invalid input or rejected request
(the reason on stderr). A failure is told in one line on stderr, ``keel: <what>``, never with
a traceback; ``-v`` adds the traceback of an unexpected one, and the rest of a long message.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from keel.worker.cli import (
    attach,
    budget,
    closing,
    codec,
    deploy,
    effects,
    evaluation,
    inspect,
    policy,
    replaying,
    schedules,
    serving,
    turns,
    ui,
)
from keel.worker.cli.console import EXIT_FAILED, EXIT_INVALID, EXIT_PIPE
from keel.worker.cli.flags import Parser, Subparsers

if TYPE_CHECKING:
    import logging

    from temporalio.service import RPCError

    from keel.worker.settings import Settings

# The command modules, each adding its commands' parsers, in the order ``keel --help`` lists them.
# Building the parser imports none of what the commands run (Temporal, the worker, the model
# providers): each command imports that when it runs.
_COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    turns.add_parser,
    effects.add_parser,
    inspect.add_parser,
    replaying.add_parser,
    evaluation.add_parser,
    closing.add_parser,
    policy.add_parser,
    budget.add_parser,
    attach.add_parser,
    schedules.add_parser,
    serving.add_parser,
    deploy.add_parser,
    ui.add_parser,
    codec.add_parser,
)
Failures = tuple[type[BaseException], ...]


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when asked for.

    Reading it looks through the installed distributions (about 20 ms), which no other
    command should pay.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        sys.stdout.write(f"keel {importlib.metadata.version('keel')}\n")
        parser.exit()


def _failures() -> tuple[Failures, Failures]:
    """The errors that exit 2 (the request itself) and those that exit 1 (what it needs).

    2: the request, with the reason; 1: Temporal, a worker or the store. Imported once a
    command runs, not to build the parser.
    """
    from keel.activities.mcp import McpConfigError, McpServerError
    from keel.activities.store import EncryptionKeyError, StoreError
    from keel.activities.tools import ToolModuleError
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.errors import RequestRejected, ScheduleNotFound, SessionNotFound
    from keel.worker.process.configured import TemporalUnreachable
    from keel.worker.server.connection import NoServerFound
    from keel.worker.server.database_record import UntrustedDatabase
    from keel.worker.server.devserver import DevServerError
    from keel.worker.settings import ConfigError
    from keel.worker.signing import ApproverKeyError
    from keel.worker.ui.serving import UiBindError

    invalid: Failures = (
        UsageError,
        ConfigError,
        NoServerFound,
        RequestRejected,
        SessionNotFound,
        ScheduleNotFound,
        ToolModuleError,
        McpConfigError,
        McpServerError,
        ApproverKeyError,
        UiBindError,
        UntrustedDatabase,
    )
    return invalid, (TemporalUnreachable, DevServerError, StoreError, EncryptionKeyError)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every ``keel`` command: each command module adds its own."""
    parser = Parser(prog="keel", description="Durable LLM agents on Temporal.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    parser.add_argument("--version", action=_Version, help="print the version")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in _COMMANDS:
        add_parser(sub)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run one ``keel`` command in this process; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    undecodable = _undecodable(parser, args)
    if undecodable is not None:
        return _fail(EXIT_INVALID, undecodable, verbose=args.verbose)
    import asyncio
    import logging
    import traceback

    from temporalio.exceptions import TemporalError
    from temporalio.service import RPCError

    from keel.worker.cli.session_access import START_A_WORKER
    from keel.worker.client.errors import NoWorker
    from keel.worker.settings import Settings

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_log_format(tracebacks=args.verbose))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    invalid, failed = _failures()
    settings = Settings.from_env()
    # what decides when no flag says: KEEL_APPROVER and KEEL_APPROVER_KEY, read in settings
    args.approver_default, args.key_default = settings.approver, settings.approver_key
    try:
        code: int = asyncio.run(args.handler(args, settings))
        return code
    except invalid as err:
        return _fail(EXIT_INVALID, str(err), verbose=args.verbose)
    except NoWorker as err:
        return _fail(EXIT_FAILED, f"{err}; {START_A_WORKER}", verbose=args.verbose)
    except failed as err:
        return _fail(EXIT_FAILED, str(err), verbose=args.verbose)
    except RPCError as err:
        return _fail(EXIT_FAILED, _rpc_failure(err, settings), verbose=args.verbose)
    except TemporalError as err:
        return _fail(EXIT_FAILED, f"Temporal: {err}", verbose=args.verbose)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug: still one line, the traceback with -v
        if isinstance(err, BrokenPipeError) and _stdout_closed():
            raise  # nobody reads the output any more: main ends quietly
        if args.verbose:
            traceback.print_exc()
        return _fail(
            EXIT_FAILED,
            f"unexpected error: {type(err).__name__}: {err} (run `keel -v ...` for details)",
            verbose=args.verbose,
        )


def _stdout_closed() -> bool:
    """Whether whoever read ``keel``'s output has stopped reading (a broken pipe).

    Flushes what is left; a pipe whose reader has gone polls as an error (Linux, BSD).
    """
    import select

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # not a file, or no poll() here
        return False


def _undecodable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first argument that is not text, in words; None when every one is.

    An argument holding bytes that are not UTF-8 (such as byte 0xff) reaches Python as
    lone surrogates, which nothing can send: it is refused here, naming it, before anything
    is read or sent.
    """
    names = _argument_names(parser, args)
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                byte = text[err.start].encode("utf-8", "surrogateescape")
                name = names.get(dest, dest)
                return f"{name} is not valid UTF-8 text (byte {byte!r} at character {err.start})"
    return None


def _argument_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """How the chosen command names each of its arguments: ``--system``, ``the prompt``."""
    names: dict[str, str] = {}
    current: argparse.ArgumentParser | None = parser
    while current is not None:
        chosen = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest or "", None) or "")
            elif action.option_strings:
                names[action.dest] = max(action.option_strings, key=len)
            else:
                names[action.dest] = f"the {action.dest.replace('_', ' ')} argument"
        current = chosen
    return names


def _log_format(*, tracebacks: bool) -> logging.Formatter:
    """How the log lines of a command (its embedded worker's too) look on stderr.

    One line each: an exception logged with a line (the SDK's "Completing activity as
    failed") adds ``type: message``, not its traceback, unless ``tracebacks`` (``-v``). A
    worker with a log of its own (``keel worker``, ``keel dev``: ``--log-format``) keeps
    the details there.
    """
    import logging

    class OneLine(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            if tracebacks or not record.exc_info:
                return super().format(record)
            err = record.exc_info[1]
            plain = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
            said = f": {type(err).__name__}: {err}" if err is not None else ""
            return super().format(plain) + said

    return OneLine("%(levelname)s %(name)s: %(message)s")


def _fail(code: int, message: str, *, verbose: bool) -> int:
    """Tell a failure on stderr in one line (all of it with ``-v``); returns ``code``."""
    first, _, rest = message.strip().partition("\n")
    if rest and verbose:
        first = message.strip()
    elif rest:
        first += " (more with `keel -v`)"
    print(f"keel: {first}", file=sys.stderr)
    return code


def _rpc_failure(err: RPCError, settings: Settings) -> str:
    """What a Temporal error that Keel does not expect means, in words."""
    from temporalio.service import RPCStatusCode

    if err.status == RPCStatusCode.UNAVAILABLE:
        where = settings.address or "the Temporal server"
        return f"lost the connection to Temporal at {where}: {err.message}"
    status = err.status.name if err.status is not None else "error"
    return f"Temporal answered {status}: {err.message}"


def main() -> None:
    """Entry point of the ``keel`` console script.

    Exits with ``os._exit`` once output is flushed: temporalio's Rust runtime threads can
    abort a short-lived client process during interpreter shutdown ("PyGILState_Release:
    thread state must be current", temporalio/sdk-python#300), which would turn a finished
    command into exit code -6. Output to a reader that stopped reading (``keel sessions |
    head -2``) ends quietly, with exit code 141 as a process stopped by SIGPIPE has.
    """
    try:
        code = run_cli()
    except SystemExit as stop:  # argparse: --help, --version, an argument error
        code = stop.code if isinstance(stop.code, int) else EXIT_INVALID if stop.code else 0
    except BrokenPipeError:
        code = EXIT_PIPE
    if _stdout_closed() and code == 0:
        code = EXIT_PIPE
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
