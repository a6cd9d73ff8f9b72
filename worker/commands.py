"""The ``keel`` commands, one coroutine each: ``(args, settings) -> exit code``."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from worker.assembly import build_worker
from worker.console import (
    EXIT_OK,
    interrupt_json,
    print_interrupts,
    print_turn,
    render_block,
    show_json,
)
from worker.devserver import DevServer
from worker.runtime import connect_configured, open_runtime
from worker.sessions import KeelClient
from worker.settings import Settings
from workflows.boundary import InputRejected, normalise_history
from workflows.contracts import SessionConfig
from workflows.messages import Message

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
            print(f"{message.role}: {render_block(block.model_dump(mode='json'))}")
    print(f"[{state.status}; {state.usage.totalTokens} tokens]")
    return EXIT_OK


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
