"""The ``keel`` command line.

Exit codes: 0 completed, 3 waiting for a human, 1 failed, 2 invalid input or rejected request
(the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from activities.tools import ToolModuleError
from worker.assembly import build_worker
from worker.devserver import DevServer, DevServerError
from worker.runtime import TemporalUnreachable, connect_configured, open_runtime
from worker.sessions import KeelClient, RequestRejected, SessionNotFound
from worker.settings import Settings
from workflows.boundary import InputRejected, normalise_history
from workflows.contracts import Interrupt, SessionConfig, SessionState, TurnRecord
from workflows.cycle import text_of
from workflows.messages import Message

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_WAITING = 3
STATUS_EXIT = {"completed": EXIT_OK, "interrupted": EXIT_WAITING}

logger = logging.getLogger("keel")


class UsageError(Exception):
    """Invalid input on the command line; exit 2 with this message."""


def _tool_modules(value: str | None) -> list[str]:
    return [m.strip() for m in (value or "").split(",") if m.strip()]


def read_messages(path: str) -> list[Message]:
    """Read a conversation to import: a JSON list of messages or ``{"messages": [...]}``.

    Raises:
        UsageError: naming the file and what is wrong with it.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"--messages {path}: cannot read: {err.strerror or err}") from err
    except json.JSONDecodeError as err:
        raise UsageError(f"--messages {path}: not valid JSON: {err}") from err
    if isinstance(raw, dict) and "messages" in raw:
        raw = raw["messages"]
    try:
        messages = TypeAdapter(list[Message]).validate_python(raw)
        normalise_history(messages)
    except ValidationError as err:
        raise UsageError(f"--messages {path}: not a list of Converse messages: {err}") from err
    except InputRejected as err:
        raise UsageError(f"--messages {path}: {err}") from err
    return messages


def interrupt_json(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt as the CLI contract shows it to approvers."""
    return {
        "id": interrupt.id,
        "kind": interrupt.kind,
        "tool_use": interrupt.tool_use.model_dump(mode="json"),
        "name": interrupt.name,
        "reason": interrupt.reason,
    }


def turn_json(session: str, record: TurnRecord) -> dict[str, Any]:
    """The contract's JSON object for a turn result."""
    return {
        "session": session,
        "workflow_id": session,
        "turn": record.turn_id,
        "status": record.status,
        "stop_reason": record.stop_reason,
        "interrupts": [interrupt_json(i) for i in record.interrupts],
        "message": record.message.model_dump(mode="json") if record.message else None,
        "usage": record.usage.model_dump(mode="json"),
        "error": record.error,
    }


def print_interrupts(session: str, interrupts: Sequence[Interrupt]) -> None:
    """Show pending interrupts to a person, with the commands that decide them."""
    for interrupt in interrupts:
        use = interrupt.tool_use
        print(f"waiting for approval: {interrupt.reason}")
        print(f"  id:    {interrupt.id}")
        print(f"  tool:  {use.name} (toolUseId {use.toolUseId})")
        print(f"  input: {json.dumps(use.input, sort_keys=True)}")
        print(f"  keel approve {session} {interrupt.id}")
        print(f"  keel deny {session} {interrupt.id} --reason '...'")


def print_turn(session: str, record: TurnRecord, as_json: bool) -> int:
    """Print a turn result; returns the exit code."""
    if as_json:
        print(json.dumps(turn_json(session, record)))
    else:
        answer = text_of(record.message)
        if answer and record.status != "interrupted":
            print(answer)
        print_interrupts(session, record.interrupts)
        if record.status not in ("completed", "interrupted"):
            print(
                f"turn {record.turn_id} of session {session} {record.status}"
                + (f": {record.error}" if record.error else ""),
                file=sys.stderr,
            )
    return STATUS_EXIT.get(record.status, EXIT_FAILED)


def _new_session_config(args: argparse.Namespace, model: str | None) -> SessionConfig:
    if not model:
        raise UsageError("no model: pass --model SPEC or set KEEL_MODEL")
    try:
        return SessionConfig(
            model=model,
            system=args.system,
            tool_modules=_tool_modules(args.tools),
            approval_tools=_tool_modules(args.require_approval),
            approvers=_tool_modules(args.approvers),
            approval_timeout_s=args.approval_timeout,
            max_cycles_per_turn=args.max_cycles,
            max_session_tokens=args.token_budget,
        )
    except ValidationError as err:
        raise UsageError(f"invalid session settings: {err}") from err


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """``keel run``: send a prompt, wait for the turn, print the result."""
    prompt = " ".join(args.prompt).strip()
    if not prompt:
        raise UsageError("the prompt is empty")
    messages = read_messages(args.messages) if args.messages else []
    modules = _tool_modules(args.tools)
    session = args.session or f"session-{uuid.uuid4().hex[:12]}"
    async with open_runtime(settings) as runtime:
        keel = KeelClient(runtime.client, settings.task_queue)
        config = None
        if await keel.exists(session):
            if messages:
                raise UsageError(
                    f"session {session!r} exists; --messages only imports into a new one"
                )
            modules = modules or (await keel.config(session)).tool_modules
        else:
            config = _new_session_config(args, args.model or settings.model)
        async with runtime.worker(modules):
            ack = await keel.prompt(session, prompt, config=config, messages=messages)
            record = await keel.wait_turn(session, ack.turn_id)
    return print_turn(session, record, args.json)


@asynccontextmanager
async def _existing_session(settings: Settings, session: str) -> AsyncIterator[KeelClient]:
    """A client for an existing session, with a worker when the server is embedded."""
    async with open_runtime(settings) as runtime:
        keel = KeelClient(runtime.client, settings.task_queue)
        config = await keel.config(session)
        async with runtime.worker(config.tool_modules):
            yield keel


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """``keel worker``: run a worker until interrupted."""
    client, address = await connect_configured(settings)
    worker = build_worker(client, args.task_queue or settings.task_queue, _tool_modules(args.tools))
    logger.info("worker on %s, task queue %s", address, worker.task_queue)
    await _run_until_signalled(worker.run, worker.shutdown)
    return EXIT_OK


async def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    """``keel dev``: embedded dev server with its web UI, plus a worker, in the foreground."""
    async with DevServer(settings.home, port=args.port, ui=True) as server:
        client, _ = await connect_configured(Settings(server.address, settings.namespace))
        worker = build_worker(client, settings.task_queue, _tool_modules(args.tools))
        print(f"Temporal at {server.address}, web UI at {server.ui_url}; Ctrl-C stops")
        await _run_until_signalled(worker.run, worker.shutdown)
    return EXIT_OK


async def _run_until_signalled(
    run: Callable[[], Coroutine[Any, Any, None]], shutdown: Callable[[], Awaitable[None]]
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(run())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await shutdown()
    waiter.cancel()
    await task


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    """``keel show``: the conversation of a session."""
    async with _existing_session(settings, args.session) as keel:
        state = await keel.state(args.session)
    if args.json:
        print(json.dumps(show_json(state)))
        return EXIT_OK
    for message in state.messages:
        for block in message.content:
            print(f"{message.role}: {_render_block(block.model_dump(mode='json'))}")
    print(f"[{state.status}; {state.usage.totalTokens} tokens]")
    return EXIT_OK


def show_json(state: SessionState) -> dict[str, Any]:
    """The contract's JSON object for ``keel show --json``."""
    return {
        "session": state.session_id,
        "workflow_id": state.session_id,
        "status": state.status,
        "messages": [m.model_dump(mode="json") for m in state.messages],
        "pending": state.pending.model_dump(mode="json"),
        "usage": state.usage.model_dump(mode="json"),
    }


def _render_block(block: dict[str, Any]) -> str:
    kind, value = next(iter(block.items()))
    if kind == "text":
        return str(value)
    return f"[{kind}] {json.dumps(value)}"


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """``keel pending``: the interrupts a session waits on, and its running tools."""
    async with _existing_session(settings, args.session) as keel:
        view = await keel.pending(args.session)
    if args.json:
        out = view.model_dump(mode="json", exclude={"interrupts"})
        out["interrupts"] = [interrupt_json(i) for i in view.interrupts]
        print(json.dumps({"session": args.session, **out}))
    elif view.interrupts:
        print_interrupts(args.session, view.interrupts)
    else:
        running = ", ".join(u.name for u in view.running) or "nothing"
        print(f"no pending interrupts in session {args.session}; running: {running}")
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """``keel cancel``: stop the running turn; prints its result."""
    async with _existing_session(settings, args.session) as keel:
        ack = await keel.cancel(args.session, args.reason)
        record = await keel.wait_turn(args.session, ack.turn_id)
    return print_turn(args.session, record, args.json)


async def cmd_decide(args: argparse.Namespace, settings: Settings) -> int:
    """``keel approve`` / ``keel deny``: decide an interrupt, then wait like ``keel run``."""
    approver = args.approver or os.environ.get("KEEL_APPROVER") or getpass.getuser()
    async with _existing_session(settings, args.session) as keel:
        ack = await keel.decide(
            args.session, args.id, args.decision, reason=args.reason, approver=approver
        )
        record = await keel.wait_turn(args.session, ack.turn_id)
    return print_turn(args.session, record, args.json)


async def cmd_steer(args: argparse.Namespace, settings: Settings) -> int:
    """``keel steer``: add guidance to the turn in progress."""
    text = " ".join(args.text).strip()
    if not text:
        raise UsageError("the steering text is empty")
    async with _existing_session(settings, args.session) as keel:
        ack = await keel.steer(args.session, text)
    print(f"guidance queued for turn {ack.turn_id} of session {args.session}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every ``keel`` command."""
    parser = argparse.ArgumentParser(prog="keel", description="Durable LLM agents on Temporal.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="send a prompt to a session and wait for the turn")
    run.add_argument("prompt", nargs="+", help="the prompt text")
    run.add_argument("--session", help="session id (default: a new one)")
    run.add_argument("--model", help="model spec for a new session (default: KEEL_MODEL)")
    run.add_argument("--system", help="system prompt for a new session")
    run.add_argument("--tools", help="tool modules, comma separated")
    run.add_argument("--messages", help="JSON file of history to import into a new session")
    run.add_argument(
        "--require-approval",
        metavar="TOOL[,TOOL]",
        help="tools that need approval in a new session",
    )
    run.add_argument("--approvers", metavar="ID[,ID]", help="who may decide (default: anyone)")
    run.add_argument(
        "--approval-timeout", type=float, metavar="SECONDS", help="deny undecided interrupts after"
    )
    run.add_argument("--max-cycles", type=int, metavar="N", help="model calls allowed per turn")
    run.add_argument("--token-budget", type=int, metavar="N", help="tokens allowed per session")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.set_defaults(handler=cmd_run)

    worker = sub.add_parser("worker", help="run a worker for an existing Temporal")
    worker.add_argument("--tools", help="tool modules, comma separated")
    worker.add_argument("--task-queue", help="task queue (default: KEEL_TASK_QUEUE or keel)")
    worker.set_defaults(handler=cmd_worker)

    dev = sub.add_parser("dev", help="embedded Temporal dev server plus a worker")
    dev.add_argument("--tools", help="tool modules, comma separated")
    dev.add_argument("--port", type=int, default=7233, help="Temporal port (default 7233)")
    dev.set_defaults(handler=cmd_dev)

    for name, handler, text in (
        ("show", cmd_show, "print a session's conversation"),
        ("pending", cmd_pending, "show what a session's running turn waits on"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("session")
        cmd.add_argument("--json", action="store_true", help="print JSON")
        cmd.set_defaults(handler=handler)

    for name, decision in (("approve", "approve"), ("deny", "deny")):
        cmd = sub.add_parser(name, help=f"{name} a pending interrupt, then wait like run")
        cmd.add_argument("session")
        cmd.add_argument("id", help="the interrupt id (see keel pending)")
        cmd.add_argument("--reason", help="why; the model sees it when denied")
        cmd.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
        cmd.add_argument("--json", action="store_true", help="print one JSON object")
        cmd.set_defaults(handler=cmd_decide, decision=decision)

    steer = sub.add_parser("steer", help="add guidance to the turn in progress")
    steer.add_argument("session")
    steer.add_argument("text", nargs="+")
    steer.set_defaults(handler=cmd_steer)

    cancel = sub.add_parser("cancel", help="cancel the running turn of a session")
    cancel.add_argument("session")
    cancel.add_argument("--reason", default="cancelled by user")
    cancel.add_argument("--json", action="store_true", help="print one JSON object")
    cancel.set_defaults(handler=cmd_cancel)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run one ``keel`` command in this process; returns its exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = Settings.from_env()
    try:
        code: int = asyncio.run(args.handler(args, settings))
        return code
    except (UsageError, RequestRejected, SessionNotFound, ToolModuleError) as err:
        print(f"keel: {err}", file=sys.stderr)
        return EXIT_INVALID
    except (TemporalUnreachable, DevServerError) as err:
        print(f"keel: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


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


if __name__ == "__main__":  # pragma: no cover
    main()
