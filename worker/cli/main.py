"""The ``keel`` command line: argument parsing and the entry point.

Exit codes: 0 completed, 3 waiting for a human, 1 failed, 2 invalid input or rejected request
(the reason on stderr). A failure is told in one line on stderr, ``keel: <what>``, never with
a traceback; ``-v`` adds the traceback of an unexpected one, and the rest of a long message.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from temporalio.exceptions import TemporalError
from temporalio.service import RPCError, RPCStatusCode

from keel.activities.mcp import McpConfigError, McpServerError
from keel.activities.store import EncryptionKeyError, StoreError
from keel.activities.tools import ToolModuleError
from keel.worker.cli.codec import cmd_codec_server
from keel.worker.cli.console import EXIT_FAILED, EXIT_INVALID
from keel.worker.cli.inspect import cmd_pending, cmd_sessions, cmd_show, cmd_watch
from keel.worker.cli.run_inputs import UsageError, add_session_flags
from keel.worker.cli.schedules import add_schedule_parser
from keel.worker.cli.serving import cmd_dev, cmd_worker
from keel.worker.cli.session_access import START_A_WORKER
from keel.worker.cli.turns import (
    cmd_cancel,
    cmd_decide,
    cmd_keygen,
    cmd_respond,
    cmd_run,
    cmd_steer,
    cmd_wait,
)
from keel.worker.cli.ui import cmd_ui
from keel.worker.client.errors import (
    NoWorker,
    RequestRejected,
    ScheduleNotFound,
    SessionNotFound,
)
from keel.worker.server.connection import TemporalUnreachable
from keel.worker.server.devserver import DevServerError
from keel.worker.settings import ConfigError, Settings
from keel.worker.shell import session_id_problem
from keel.worker.signing import ApproverKeyError
from keel.worker.ui.serving import DEFAULT_HOST, DEFAULT_PORT, UiBindError

# Failures of the request itself: exit 2 with the reason.
_INVALID = (
    UsageError,
    ConfigError,
    RequestRejected,
    SessionNotFound,
    ScheduleNotFound,
    ToolModuleError,
    McpConfigError,
    McpServerError,
    ApproverKeyError,
    UiBindError,
)
# Failures of what the command needs (Temporal, a worker, the store): exit 1.
_FAILED = (TemporalUnreachable, DevServerError, StoreError, EncryptionKeyError)


def _session_id(value: str) -> str:
    """A SESSION argument (``--session`` too): refused, naming the rule, unless a session id."""
    problem = session_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser that tells a mistake in one line: what is wrong, where to look."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: <message> (see `<prog> --help`)`` on stderr and exit 2."""
        self.exit(EXIT_INVALID, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _waiting_flags(cmd: argparse.ArgumentParser) -> None:
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


def _mcp_flag(cmd: argparse.ArgumentParser) -> None:
    """``--mcp NAME=COMMAND`` or ``--mcp NAME=URL``, repeatable: the worker's MCP servers."""
    cmd.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=COMMAND|URL",
        help="an MCP server for the worker: a stdio command or a streamable-HTTP URL "
        "(repeatable; its tools keep their names, --tools mcp:NAME limits a session to it)",
    )


def _key_flag(cmd: argparse.ArgumentParser) -> None:
    """``--key FILE``: the approver's private key, to sign with."""
    cmd.add_argument(
        "--key",
        metavar="FILE",
        help="sign with this private key (from `keel keygen`; default: KEEL_APPROVER_KEY)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every ``keel`` command."""
    parser = _Parser(prog="keel", description="Durable LLM agents on Temporal.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="send a prompt to a session and wait for the turn")
    run.add_argument("prompt", nargs="+", help="the prompt text")
    run.add_argument(
        "--session", type=_session_id, help="session id (default: a new one)"
    )
    add_session_flags(run)
    _mcp_flag(run)
    run.add_argument("--messages", help="JSON file of history to import into a new session")
    run.add_argument(
        "--detach",
        action="store_true",
        help="send the prompt and return at once, printing the session id (`keel wait` "
        "follows it later); needs a Temporal that outlives the command (`keel dev`)",
    )
    _waiting_flags(run)
    run.set_defaults(handler=cmd_run)

    wait = sub.add_parser(
        "wait",
        help="wait for a session's latest turn and print it like run",
        description="Wait until the session's latest turn ends or needs a person, then print "
        "what `keel run` would have printed, with the same exit codes; 124 on --timeout.",
    )
    wait.add_argument("session", type=_session_id)
    wait.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="give up after this long (exit 124)"
    )
    _waiting_flags(wait)
    wait.set_defaults(handler=cmd_wait)

    add_schedule_parser(sub)

    worker = sub.add_parser(
        "worker",
        help="run a worker for an existing Temporal",
        description="Run a worker until SIGTERM or Ctrl-C. Each flag overrides the "
        "environment variable named in its help; see docs/deployment.md.",
    )
    worker.add_argument("--tools", help="tool modules, comma separated")
    _mcp_flag(worker)
    worker.add_argument("--task-queue", help="task queue (default: KEEL_TASK_QUEUE or keel)")
    for flag, meta, text in (
        ("--address", "HOST:PORT", "Temporal frontend (TEMPORAL_ADDRESS)"),
        ("--namespace", "NS", "namespace (TEMPORAL_NAMESPACE, default: default)"),
        ("--tls-cert", "PEM", "client certificate for mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH)"),
        ("--tls-key", "PEM", "its private key (TEMPORAL_TLS_CLIENT_KEY_PATH)"),
        ("--tls-ca", "PEM", "CA of the server (TEMPORAL_TLS_SERVER_CA_CERT_PATH)"),
        ("--tls-server-name", "NAME", "name on the server certificate (TEMPORAL_TLS_SERVER_NAME)"),
        ("--max-concurrent-activities", "N", "KEEL_MAX_CONCURRENT_ACTIVITIES (default 100)"),
        ("--max-concurrent-workflow-tasks", "N", "KEEL_MAX_CONCURRENT_WORKFLOW_TASKS"),
        ("--max-cached-workflows", "N", "KEEL_MAX_CACHED_WORKFLOWS (default 1000)"),
        ("--shutdown-grace", "SECONDS", "KEEL_SHUTDOWN_GRACE_S: time to finish after SIGTERM"),
        ("--health-port", "PORT", "serve /healthz and /readyz (KEEL_HEALTH_PORT)"),
        ("--metrics-port", "PORT", "serve Prometheus /metrics (KEEL_METRICS_PORT)"),
        ("--otlp-endpoint", "URL", "export traces by OTLP/HTTP (KEEL_OTLP_ENDPOINT)"),
        ("--log-format", "text|json", "KEEL_LOG_FORMAT (default text)"),
        ("--log-level", "LEVEL", "KEEL_LOG_LEVEL: DEBUG, INFO, WARNING (default), ERROR"),
    ):
        worker.add_argument(flag, metavar=meta, help=text)
    worker.add_argument(
        "--tls", action="store_true", help="use TLS with the system's roots (TEMPORAL_TLS=true)"
    )
    worker.set_defaults(handler=cmd_worker)

    dev = sub.add_parser("dev", help="embedded Temporal dev server plus a worker")
    dev.add_argument("--tools", help="tool modules, comma separated")
    _mcp_flag(dev)
    dev.add_argument("--port", type=int, default=7233, help="Temporal port (default 7233)")
    dev.add_argument(
        "--ui-port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port of Keel's web page on 127.0.0.1 (default {DEFAULT_PORT}; see docs/ui.md)",
    )
    dev.set_defaults(handler=cmd_dev)

    for name, handler, text in (
        ("show", cmd_show, "print a session's conversation"),
        ("pending", cmd_pending, "show what a session's running turn waits on"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("session", type=_session_id)
        cmd.add_argument("--json", action="store_true", help="print JSON")
        cmd.set_defaults(handler=handler)

    for name, decision in (("approve", "approve"), ("deny", "deny")):
        cmd = sub.add_parser(name, help=f"{name} a pending interrupt, then wait like run")
        cmd.add_argument("session", type=_session_id)
        cmd.add_argument("id", help="the interrupt id (see keel pending)")
        cmd.add_argument("--reason", help="why; the model sees it when denied")
        cmd.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
        _key_flag(cmd)
        _waiting_flags(cmd)
        cmd.set_defaults(handler=cmd_decide, decision=decision)

    answer = sub.add_parser("respond", help="answer a tool's question, then wait like run")
    answer.add_argument("session", type=_session_id)
    answer.add_argument("id", help="the question's interrupt id (see keel pending)")
    answer.add_argument("value", help="the answer: JSON if it parses as JSON, else text")
    answer.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
    _key_flag(answer)
    _waiting_flags(answer)
    answer.set_defaults(handler=cmd_respond)

    keygen = sub.add_parser(
        "keygen",
        help="make an approver key pair; prints the public key last",
        description="Write an Ed25519 private key (PEM, mode 0600) and print its public key, "
        "for `keel run --approver-key NAME=PUBLIC_KEY`.",
    )
    keygen.add_argument("name", help="the approver's name")
    keygen.add_argument("--out", metavar="FILE", help="where to write it (default: NAME.key)")
    keygen.set_defaults(handler=cmd_keygen)

    codec = sub.add_parser(
        "codec-server",
        help="decode encrypted payloads for the Temporal Web UI and CLI",
        description="Serve Temporal's codec protocol (POST /encode, /decode) with "
        "KEEL_ENCRYPTION_KEY and KEEL_DECRYPTION_KEYS; callers send "
        "Authorization: Bearer $KEEL_CODEC_TOKEN.",
    )
    codec.add_argument("--port", type=int, required=True, help="port to listen on")
    codec.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    codec.add_argument(
        "--cors-origin",
        action="append",
        metavar="URL",
        help="a browser origin allowed to call it, repeatable (default: the dev server's UI, "
        "http://localhost:8233)",
    )
    codec.set_defaults(handler=cmd_codec_server)

    ui = sub.add_parser(
        "ui",
        help="serve the web page for approvals: sessions, live progress, approve/deny/answer",
        description="Serve Keel's web page for the Temporal of TEMPORAL_ADDRESS (same settings "
        "as every command). With KEEL_UI_TOKEN set, every request needs it (Bearer, or "
        "?token= once); without it, only loopback addresses are allowed. See docs/ui.md.",
    )
    ui.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; others need KEEL_UI_TOKEN)",
    )
    ui.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    _key_flag(ui)
    ui.set_defaults(handler=cmd_ui)

    steer = sub.add_parser("steer", help="add guidance to the turn in progress")
    steer.add_argument("session", type=_session_id)
    steer.add_argument("text", nargs="+")
    steer.set_defaults(handler=cmd_steer)

    cancel = sub.add_parser("cancel", help="cancel the running turn of a session")
    cancel.add_argument("session", type=_session_id)
    cancel.add_argument("--reason", default="cancelled by user")
    _waiting_flags(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    watch = sub.add_parser("watch", help="follow a session's events live")
    watch.add_argument("session", type=_session_id)
    watch.add_argument(
        "--since", type=int, default=0, metavar="N", help="skip the first N events (default 0)"
    )
    watch.add_argument("--json", action="store_true", help="print each event as a JSON line")
    watch.add_argument(
        "--until-idle",
        action="store_true",
        help="stop when no turn runs or is queued (exit 0) or one waits for approval (exit 3)",
    )
    watch.set_defaults(handler=cmd_watch)

    sessions = sub.add_parser("sessions", help="list sessions, newest first")
    sessions.add_argument("--json", action="store_true", help="print a JSON array")
    sessions.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N sessions (default 20)"
    )
    sessions.set_defaults(handler=cmd_sessions)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run one ``keel`` command in this process; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    undecodable = _undecodable(parser, args)
    if undecodable is not None:
        return _fail(EXIT_INVALID, undecodable, verbose=args.verbose)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = Settings.from_env()
    try:
        code: int = asyncio.run(args.handler(args, settings))
        return code
    except _INVALID as err:
        return _fail(EXIT_INVALID, str(err), verbose=args.verbose)
    except NoWorker as err:
        return _fail(EXIT_FAILED, f"{err}; {START_A_WORKER}", verbose=args.verbose)
    except _FAILED as err:
        return _fail(EXIT_FAILED, str(err), verbose=args.verbose)
    except RPCError as err:
        return _fail(EXIT_FAILED, _rpc_failure(err, settings), verbose=args.verbose)
    except TemporalError as err:
        return _fail(EXIT_FAILED, f"Temporal: {err}", verbose=args.verbose)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug: still one line, the traceback with -v
        if args.verbose:
            traceback.print_exc()
        return _fail(
            EXIT_FAILED,
            f"unexpected error: {type(err).__name__}: {err} (run `keel -v ...` for details)",
            verbose=args.verbose,
        )


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
    command into exit code -6.
    """
    code = run_cli()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
