"""The ``keel`` commands, one coroutine each: ``(args, settings) -> exit code``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO, TypeVar

from temporalio.worker import Worker

from activities.store import open_store
from worker.assembly import build_worker, freeze_startup_heap
from worker.console import (
    EXIT_OK,
    EXIT_WAITING,
    ask_decision,
    ask_question,
    interrupt_json,
    parse_answer,
    print_interrupts,
    print_sessions,
    print_turn,
    print_where,
    render_block,
    sessions_json,
    show_json,
)
from worker.devserver import DevServer
from worker.follow import Follower
from worker.run_inputs import (
    UsageError,
    check_model,
    new_session_config,
    read_messages,
    sendable_model,
    tool_modules,
)
from worker.runtime import Runtime, connect_configured, open_runtime
from worker.sandbox import sandbox_runner
from worker.sessions import KeelClient, RequestRejected, WorkerWait
from worker.settings import Settings
from workflows.contracts import SessionState
from workflows.session import AgentSession

logger = logging.getLogger("keel")


# What to do when no worker answers: said after each "no worker" line.
START_A_WORKER = "start one with `keel worker` (or `keel dev`)"
# How long a query may wait for a worker before ``keel show`` or ``keel pending`` gives up.
QUERY_TIMEOUT_S = 10.0


def say_waiting(wait: WorkerWait) -> None:
    """Tell the person on stderr that a request waits for a worker."""
    print(f"keel: {wait}; {START_A_WORKER}", file=sys.stderr, flush=True)


def keel_client(runtime: Runtime, *, wait_for_worker: bool) -> KeelClient:
    """The client of a command.

    Args:
        runtime: the command's Temporal.
        wait_for_worker: when no worker answers, keep asking and say so on stderr now and
            then (commands that follow a turn), instead of failing with ``NoWorker`` after
            ``QUERY_TIMEOUT_S``.
    """
    settings = runtime.settings
    return KeelClient(
        runtime.client,
        settings.task_queue,
        open_store(settings.store),
        query_timeout_s=QUERY_TIMEOUT_S,
        wait_for_worker=wait_for_worker,
        on_waiting=say_waiting if wait_for_worker else None,
    )


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """``keel run``: send a prompt, wait for the turn, print the result."""
    prompt = " ".join(args.prompt).strip()
    if not prompt:
        raise UsageError("the prompt is empty")
    messages = read_messages(args.messages) if args.messages else []
    modules = tool_modules(args.tools)
    session = args.session or f"session-{uuid.uuid4().hex[:12]}"
    model: str | None = args.model or settings.model
    if model:
        check_model(model, local=False)  # before starting anything
    async with open_runtime(settings) as runtime:
        keel = keel_client(runtime, wait_for_worker=True)
        config = None
        if await keel.exists(session):
            await keel.check_open(session)
            if messages:
                raise UsageError(
                    f"session {session!r} exists; --messages only imports into a new one"
                )
            modules = modules or (await keel.config(session)).tool_modules
        else:
            config = new_session_config(args, model)
            check_model(config.model, local=runtime.embedded)
            config = config.model_copy(update={"model": sendable_model(config.model)})
        queue = await keel.session_task_queue(session)
        async with runtime.worker(modules, task_queue=queue):
            try:
                since = 0 if config is not None else await keel.event_count(session)
                ack = await keel.prompt(session, prompt, config=config, messages=messages)
                out = _progress_out(args)
                if out is not None and ack.queued_behind:
                    print(f"turn {ack.turn_id} queued behind {ack.queued_behind} turn(s)", file=out)
                code = await _finish_turn(keel, session, ack.turn_id, since, args)
            except asyncio.CancelledError:  # Ctrl-C: the session goes on without us
                if not args.json:
                    print_where(session)
                raise
            if not args.json:
                print_where(session)
            return code


def _progress_out(args: argparse.Namespace) -> TextIO | None:
    """Where a waiting command reports progress: stderr when asked or a terminal, else None."""
    if getattr(args, "progress", False) or (not args.json and sys.stderr.isatty()):
        return sys.stderr
    return None


def _interactive(args: argparse.Namespace) -> bool:
    """Whether to ask a person for approvals: a terminal on both ends, and allowed to."""
    if args.json or getattr(args, "no_input", False):
        return False
    return sys.stdin.isatty() and sys.stdout.isatty()


def _approver(args: argparse.Namespace) -> str:
    return getattr(args, "approver", None) or os.environ.get("KEEL_APPROVER") or getpass.getuser()


async def _finish_turn(
    keel: KeelClient, session: str, turn_id: int, since: int, args: argparse.Namespace
) -> int:
    """Follow a turn until it settles, asking for approvals when a person is there; print it.

    Progress goes to stderr (see ``_progress_out``); the result to stdout as ``print_turn``
    prints it. When the turn waits for approval and the terminal is interactive, each
    pending interrupt is shown and decided by the person's answer, and following goes on
    until the turn ends or waits again. No answer (end of input, Ctrl-C) leaves the
    interrupt pending: exit 3.
    """
    out = _progress_out(args)
    follower = Follower(keel, session, since, out=out, turn=turn_id, stream_text=out is not None)
    record = await follower.turn_settled(turn_id)
    refused: set[str] = set()
    while record.status == "awaiting_human" and _interactive(args):
        asked = [i for i in record.interrupts if i.id not in refused]
        if not asked:
            break
        for interrupt in asked:
            try:
                if interrupt.kind == "question":
                    value = await ask_question(interrupt)
                    if value is None:
                        return print_turn(session, await keel.turn(session, turn_id), False)
                    await keel.respond(session, interrupt.id, value[0], responder=_approver(args))
                    continue
                answer = await ask_decision(interrupt)
                if answer is None:
                    return print_turn(session, await keel.turn(session, turn_id), False)
                decision, reason = answer
                await keel.decide(
                    session, interrupt.id, decision, reason=reason, approver=_approver(args)
                )
            except RequestRejected as err:
                print(f"keel: {err}", file=sys.stderr)
                refused.add(interrupt.id)
        record = await follower.turn_settled(turn_id)
    return print_turn(session, record, args.json)


@asynccontextmanager
async def _existing_session(
    settings: Settings, session: str, *, writes: bool, wait_for_worker: bool
) -> AsyncIterator[KeelClient]:
    """A client for an existing session, with a worker when the server is embedded.

    Args:
        settings: process settings.
        session: the session.
        writes: the command changes the session, so it must still run.
        wait_for_worker: the command follows the session: keep asking when no worker
            answers, instead of failing.

    Raises:
        SessionNotFound: no such session.
        SessionClosed: ``writes``, and the session has ended.
        NoWorker: not ``wait_for_worker``, and no worker polls the session's task queue.
    """
    async with open_runtime(settings) as runtime:
        keel = keel_client(runtime, wait_for_worker=wait_for_worker)
        if writes:
            await keel.check_open(session)
        config = await keel.config(session)
        if not wait_for_worker and not runtime.embedded:
            await keel.check_worker(session)
        queue = await keel.session_task_queue(session)
        async with runtime.worker(config.tool_modules, task_queue=queue):
            yield keel


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """``keel worker``: run a worker until SIGTERM or Ctrl-C, then shut down gracefully.

    Flags win over their environment variables (see ``worker.settings``); an invalid
    setting exits 2 with the reason.
    """
    from worker.serve import serve_worker
    from worker.settings import FLAG_NAMES, ConfigError, WorkerSettings

    flags = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FLAG_NAMES.items()}
    settings = dataclasses.replace(
        settings,
        address=flags["TEMPORAL_ADDRESS"] or settings.address,
        namespace=flags["TEMPORAL_NAMESPACE"] or settings.namespace,
        task_queue=flags["KEEL_TASK_QUEUE"] or settings.task_queue,
        tls="true" if args.tls else settings.tls,
        tls_cert=args.tls_cert or settings.tls_cert,
        tls_key=args.tls_key or settings.tls_key,
        tls_ca=args.tls_ca or settings.tls_ca,
        tls_server_name=args.tls_server_name or settings.tls_server_name,
    )
    try:
        config = WorkerSettings.load(flags=flags)
        await serve_worker(settings, config, tool_modules(args.tools))
    except ConfigError as err:
        raise UsageError(str(err)) from err
    return EXIT_OK


async def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    """``keel dev``: embedded dev server with its web UI, plus a worker, in the foreground."""
    async with DevServer(
        settings.home, port=args.port, ui=True, namespace=settings.namespace
    ) as server:
        client, _ = await connect_configured(Settings(server.address, settings.namespace))
        worker = build_worker(client, settings.task_queue, tool_modules(args.tools))
        freeze_startup_heap()
        print(f"Temporal at {server.address}, web UI at {server.ui_url}; Ctrl-C stops", flush=True)
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
    async with _existing_session(
        settings, args.session, writes=False, wait_for_worker=False
    ) as keel:
        state = await keel.state(args.session)
    if args.json:
        print(json.dumps(show_json(state)))
        return EXIT_OK
    for message in state.messages:
        for block in message.content:
            print(f"{message.role}: {render_block(block.model_dump(mode='json'))}")
    for t in state.turns:
        u = t.usage
        print(
            f"[turn {t.turn_id} {t.status}: {t.cycles} model calls, "
            f"{u.inputTokens} in / {u.outputTokens} out tokens]"
        )
    u = state.usage
    print(f"[{state.status}; {u.totalTokens} tokens: {u.inputTokens} in / {u.outputTokens} out]")
    return EXIT_OK


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """``keel pending``: the interrupts a session waits on, and its running tools."""
    async with _existing_session(
        settings, args.session, writes=False, wait_for_worker=False
    ) as keel:
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
    async with _existing_session(settings, args.session, writes=True, wait_for_worker=True) as keel:
        since = await keel.event_count(args.session)
        ack = await keel.cancel(args.session, args.reason)
        return await _finish_turn(keel, args.session, ack.turn_id, since, args)


async def cmd_decide(args: argparse.Namespace, settings: Settings) -> int:
    """``keel approve`` / ``keel deny``: decide an interrupt, then wait like ``keel run``."""
    async with _existing_session(settings, args.session, writes=True, wait_for_worker=True) as keel:
        since = await keel.event_count(args.session)
        ack = await keel.decide(
            args.session, args.id, args.decision, reason=args.reason, approver=_approver(args)
        )
        return await _finish_turn(keel, args.session, ack.turn_id, since, args)


T = TypeVar("T")


async def _until_ctrl_c(work: Coroutine[Any, Any, T]) -> T | None:
    """Run ``work`` until it returns or the user presses Ctrl-C (then None)."""
    loop = asyncio.get_running_loop()
    pressed = asyncio.Event()
    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, pressed.set)
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(pressed.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)
        waiter.cancel()
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
    return None if task.cancelled() else task.result()


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    """``keel watch``: print a session's events as they happen.

    Runs until Ctrl-C or the session closes (exit 0); with ``--until-idle``, until no turn
    runs or is queued (exit 0) or a turn waits for a human (exit 3).
    """
    waiting = False

    def idle(state: SessionState) -> bool:
        nonlocal waiting
        if not args.until_idle:
            return False
        waiting = any(t.status == "awaiting_human" for t in state.turns)
        return waiting or all(t.status not in ("queued", "running") for t in state.turns)

    async with _existing_session(
        settings, args.session, writes=False, wait_for_worker=True
    ) as keel:
        follower = Follower(
            keel,
            args.session,
            args.since,
            out=sys.stdout,
            style="json" if args.json else "events",
            stream_text=not args.json,
        )
        await _until_ctrl_c(follower.follow(idle))
        if follower.text is not None:
            follower.text.end_line()
    return EXIT_WAITING if waiting else EXIT_OK


@asynccontextmanager
async def _query_worker(runtime: Runtime) -> AsyncIterator[None]:
    """With an embedded server, a worker that answers queries (workflows only, no tools)."""
    if not runtime.embedded:
        yield
        return
    worker = Worker(
        runtime.client,
        task_queue=runtime.settings.task_queue,
        workflows=[AgentSession],
        workflow_runner=sandbox_runner(),
    )
    async with worker:
        yield


async def cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    """``keel sessions``: the sessions on this task queue, newest first."""
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    async with open_runtime(settings) as runtime, _query_worker(runtime):
        keel = KeelClient(runtime.client, settings.task_queue, open_store(settings.store))
        sessions = await keel.list_sessions(limit=args.limit)
    if args.json:
        print(json.dumps(sessions_json(sessions)))
    else:
        print_sessions(sessions, settings.task_queue)
    return EXIT_OK


async def cmd_respond(args: argparse.Namespace, settings: Settings) -> int:
    """``keel respond``: answer a tool's question, then wait like ``keel run``."""
    value = parse_answer(args.value)
    async with _existing_session(settings, args.session, writes=True, wait_for_worker=True) as keel:
        since = await keel.event_count(args.session)
        ack = await keel.respond(args.session, args.id, value, responder=_approver(args))
        return await _finish_turn(keel, args.session, ack.turn_id, since, args)


async def cmd_steer(args: argparse.Namespace, settings: Settings) -> int:
    """``keel steer``: add guidance to the turn in progress."""
    text = " ".join(args.text).strip()
    if not text:
        raise UsageError("the steering text is empty")
    async with _existing_session(settings, args.session, writes=True, wait_for_worker=True) as keel:
        ack = await keel.steer(args.session, text)
    print(f"guidance queued for turn {ack.turn_id} of session {args.session}")
    return EXIT_OK
