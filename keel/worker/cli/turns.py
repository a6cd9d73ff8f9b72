"""The ``keel`` commands that act on a turn and wait for it.

``run``, ``wait``, ``approve``/``deny``, ``respond``, ``cancel``, ``steer`` (and ``keygen``,
for signed decisions); each a coroutine ``(args, settings) -> exit code``. ``add_parser``
adds their parsers to ``keel``'s. What other command modules that act share is public here:
``acting``, ``within_limits``; following the turn and asking on the terminal is in
``keel.worker.cli.turn_follow``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keel.worker.cli import flags
from keel.worker.cli.console import (
    EXIT_ENDED,
    EXIT_OK,
    EXIT_TIMEOUT,
    detached_json,
    parse_answer,
    print_detached,
    print_interrupted,
    print_where,
)
from keel.worker.cli.turn_follow import (
    approver_key,
    approver_name,
    finish_turn,
    mcp_words,
    progress_out,
)

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from contextlib import AbstractAsyncContextManager

    from keel.worker.cli.session_access import SessionAccess
    from keel.worker.client.keel_client import KeelClient
    from keel.worker.settings import Settings
    from keel.workflows.contracts import Condition, SessionConfig
    from keel.workflows.messages import Message


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """``keel run``: send a prompt, wait for the turn, print the result.

    One function on purpose (past 80 lines): ``keel run``'s steps in the order a person sees them.
    """
    import asyncio
    import uuid

    from keel.worker.cli.run_inputs import (
        UsageError,
        agent_modules,
        check_model,
        check_model_given,
        check_start_size,
        mcp_servers,
        new_session_config,
        read_agent,
        read_messages,
        sendable_model,
        tool_modules,
    )
    from keel.worker.cli.session_access import keel_client, require_lasting_server
    from keel.worker.server.connection import open_connection
    from keel.worker.shell import session_id_problem
    from keel.workflows.boundary import InputRejected, validate_prompt
    from keel.workflows.messages import text_block

    prompt = " ".join(args.prompt).strip()
    if not prompt:
        raise UsageError("the prompt is empty")
    try:  # before anything is sent, as KeelClient and the session would
        validate_prompt("user", [text_block(prompt)])
    except InputRejected as err:
        raise UsageError(f"the prompt: {err}") from None
    messages = read_messages(args.messages) if args.messages else []
    modules = tool_modules(args.tools)
    servers = mcp_servers(args.mcp, settings.environ)
    session = args.session or f"session-{uuid.uuid4().hex[:12]}"
    check_model_given(args.model, settings.model)  # before reading files or starting anything
    agent = read_agent(args.agent, args.model or settings.model)
    model: str | None = args.model or (agent.config.model if agent else settings.model)
    # the files and flags of a new session, checked before a server starts (no model: the
    # session must exist, which only the server can tell)
    fresh = new_session_config(args, model, agent) if model else None
    if args.detach:
        await require_lasting_server(settings, "keel run --detach")
    async with open_connection(settings, create=_say_created, port=args.port) as connection:
        if servers and not connection.embedded:
            raise UsageError(
                "--mcp configures the worker that keel run embeds; with a Temporal of your own "
                "(TEMPORAL_ADDRESS, or keel dev), give --mcp to keel worker or keel dev"
            )
        if args.port is not None and not connection.embedded:
            raise UsageError(
                f"--port is the port of the Temporal keel run starts when it knows of none; "
                f"this one uses the Temporal at {connection.address} (TEMPORAL_ADDRESS, or "
                "keel dev)"
            )
        keel = keel_client(connection, wait_for_worker=True)
        config = None
        if await keel.exists(session):
            await keel.check_open(session)
            if messages:
                raise UsageError(
                    f"session {session!r} exists; --messages only imports into a new one"
                )
            modules = modules or (await keel.config(session)).tool_modules
        else:
            problem = session_id_problem(session, new=True)
            if problem is not None:
                raise UsageError(f"--session: {problem}")
            config = fresh or new_session_config(args, model, agent)
            check_model(config.model, local=connection.embedded)
            config = config.model_copy(update={"model": sendable_model(config.model)})
            check_start_size(config, messages, prompt, args.messages)
            modules = modules or agent_modules(agent)
        if args.detach:
            return await _detach(keel, session, prompt, config, messages, args)
        queue = await keel.session_task_queue(session)
        embedded = connection.embedded
        async with connection.worker(modules, task_queue=queue, mcp_servers=servers):
            try:
                since = 0 if config is not None else await keel.event_count(session)
                ack = await keel.prompt(session, prompt, config=config, messages=messages)
            except asyncio.CancelledError:  # Ctrl-C: the prompt may have been taken
                print_interrupted(session, None, embedded=embedded, extra=mcp_words(args))
                raise
            out = progress_out(args)
            if out is not None and ack.queued_behind:
                print(f"turn {ack.turn_id} queued behind {ack.queued_behind} turn(s)", file=out)
            code = await finish_turn(keel, session, ack.turn_id, since, args, embedded=embedded)
            if not args.json:
                print_where(session, closed=await _closed(keel, session), extra=mcp_words(args))
            return code


def _say_created(data_dir: Path) -> None:
    """Say on stderr that ``keel run`` keeps this folder's sessions in a new data directory."""
    from keel.worker.shell import command

    print(
        f"keel: note: no Temporal known here, so keel runs its own, keeping the sessions in "
        f"{data_dir} (new); keel commands find them from this folder, or with "
        f"{command(f'KEEL_HOME={data_dir}')}",
        file=sys.stderr,
        flush=True,
    )


async def _detach(
    keel: KeelClient,
    session: str,
    prompt: str,
    config: SessionConfig | None,
    messages: list[Message],
    args: argparse.Namespace,
) -> int:
    """``keel run --detach``: start the turn, print the session id (or JSON), return at once.

    A new session starts with the prompt in its start input, which needs no worker yet; a
    prompt to a running session is an update, which a worker must accept first.
    """
    from keel.worker.client.calls import pollers

    if config is not None:
        ack = await keel.start(session, prompt, config=config, messages=messages)
    else:
        await keel.check_worker(session)
        ack = await keel.prompt(session, prompt)
    if args.json:
        print(json.dumps(detached_json(session, ack.turn_id)))
    else:
        print(session)
    workers = await pollers(keel.client, await keel.session_task_queue(session))
    if workers.none:
        print(f"keel: note: {workers}; the turn starts once a worker polls it", file=sys.stderr)
    print_detached(session, ack.turn_id)
    return EXIT_OK


async def cmd_wait(args: argparse.Namespace, settings: Settings) -> int:
    """``keel wait``: wait for the session's latest turn; print it as ``keel run`` would."""
    import asyncio

    from keel.worker.cli.run_inputs import UsageError

    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be more than 0 seconds")
    async with acting(settings, args, writes=False) as access:
        keel = access.keel
        state = await keel.state(args.session, events_since=sys.maxsize, include_messages=False)
        if not state.turns:
            end = await keel.ended(args.session)
            if end is not None:  # a start Temporal failed (bad input), say: nothing will run
                print(f"keel: {end.text}", file=sys.stderr)
                return EXIT_ENDED
            raise UsageError(f"session {args.session!r} has no turn to wait for")
        turn_id = max(t.turn_id for t in state.turns)
        try:
            code = await asyncio.wait_for(
                finish_turn(keel, args.session, turn_id, 0, args, embedded=access.embedded),
                args.timeout,
            )
        except TimeoutError:
            print(
                f"keel: timed out after {args.timeout:g} s: turn {turn_id} of session "
                f"{args.session} still runs",
                file=sys.stderr,
            )
            return EXIT_TIMEOUT
        closed = await _closed(keel, args.session)
    if not args.json:
        print_where(args.session, closed=closed, extra=mcp_words(args))
    return code


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """``keel cancel``: stop the running turn; prints its result."""
    from keel.workflows.contracts import CancelInput

    within_limits(CancelInput(reason=args.reason))
    async with acting(settings, args, writes=True) as access:
        since = await access.keel.event_count(args.session)
        ack = await access.keel.cancel(args.session, args.reason)
        return await finish_turn(
            access.keel, args.session, ack.turn_id, since, args, embedded=access.embedded
        )


async def cmd_decide(args: argparse.Namespace, settings: Settings) -> int:
    """``keel approve`` / ``keel deny``: decide an interrupt, then wait like ``keel run``."""
    from keel.workflows.contracts import Decision

    key = approver_key(args)  # a bad key file fails before anything is sent
    always = getattr(args, "always", False) or getattr(args, "always_when", None) is not None
    when = _always_when(args)
    bounds = standing_bounds(args, always)
    extend = getattr(args, "extend", None)
    if extend is not None and not (0 < extend < float("inf")):
        from keel.worker.cli.run_inputs import UsageError

        raise UsageError("--extend must be a number more than 0")
    decision = Decision(
        interrupt_id=args.id,
        decision=args.decision,
        reason=args.reason,
        approver=approver_name(args),
        always=always,
        always_when=when,
        extend=extend,
        **bounds,
    )
    within_limits(decision)
    async with acting(settings, args, writes=True) as access:
        since = await access.keel.event_count(args.session)
        ack = await access.keel.decide(
            args.session,
            args.id,
            args.decision,
            reason=args.reason,
            approver=decision.approver,
            key=key,
            always=always,
            always_when=when,
            extend=decision.extend,
            **bounds,
        )
        return await finish_turn(
            access.keel, args.session, ack.turn_id, since, args, embedded=access.embedded
        )


async def cmd_respond(args: argparse.Namespace, settings: Settings) -> int:
    """``keel respond``: answer a tool's question, then wait like ``keel run``."""
    from keel.workflows.contracts import Answer

    value = parse_answer(args.value)
    key = approver_key(args)
    within_limits(Answer(interrupt_id=args.id, value=value, responder=approver_name(args)))
    async with acting(settings, args, writes=True) as access:
        keel = access.keel
        since = await keel.event_count(args.session)
        responder = approver_name(args)
        ack = await keel.respond(args.session, args.id, value, responder=responder, key=key)
        return await finish_turn(
            keel, args.session, ack.turn_id, since, args, embedded=access.embedded
        )


async def cmd_steer(args: argparse.Namespace, settings: Settings) -> int:
    """``keel steer``: add guidance to the turn in progress."""
    from keel.worker.cli.run_inputs import UsageError

    text = " ".join(args.text).strip()
    if not text:
        raise UsageError("the steering text is empty")
    from keel.workflows.contracts import SteerInput

    within_limits(SteerInput(text=text))
    async with acting(settings, args, writes=True) as access:
        ack = await access.keel.steer(args.session, text)
    print(f"guidance queued for turn {ack.turn_id} of session {args.session}")
    return EXIT_OK


def acting(
    settings: Settings, args: argparse.Namespace, *, writes: bool
) -> AbstractAsyncContextManager[SessionAccess]:
    """The session of a command that acts on it (and follows its turn), with ``--mcp``."""
    from keel.worker.cli.run_inputs import mcp_servers
    from keel.worker.cli.session_access import existing_session

    servers = mcp_servers(args.mcp, settings.environ)
    return existing_session(
        settings, args.session, writes=writes, wait_for_worker=True, mcp=servers
    )


async def _closed(keel: KeelClient, session: str) -> bool:
    """Whether the session takes no more turns (a scheduled job's, once its one turn ended)."""
    from keel.worker.client.errors import SessionNotFound

    try:
        state = await keel.state(session, events_since=sys.maxsize, include_messages=False)
    except SessionNotFound:
        return True
    return state.status not in ("idle", "running")  # closing, closed, or ended in Temporal


async def cmd_keygen(args: argparse.Namespace, settings: Settings) -> int:
    """``keel keygen NAME``: write a private key; print its public key, last."""
    from keel.worker.signing import generate_key

    path = args.out or f"{args.name}.key"
    public = generate_key(path)
    print(f"private key of approver {args.name!r} written to {path} (keep it secret)")
    print(f"start a session with: --approver-key {args.name}={public}")
    print(public)
    return EXIT_OK


def _always_when(args: argparse.Namespace) -> list[Condition]:
    """The tests of ``--always-when`` (which implies ``--always``).

    Raises:
        UsageError: they do not read as tests.
    """
    text = getattr(args, "always_when", None)
    if text is None:
        return []
    from keel.worker.cli.run_inputs import UsageError
    from keel.workflows.standing import parse_conditions

    try:
        return parse_conditions(text)
    except ValueError as err:
        raise UsageError(f"--always-when: {err}") from None


def standing_bounds(args: argparse.Namespace, always: bool) -> dict[str, Any]:
    """``--max-uses``, ``--for`` and ``--total`` as ``decide``'s arguments (only those given).

    Raises:
        UsageError: one is given without ``--always`` / ``--always-when``, or does not read.
    """
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.cli.schedules import parse_duration
    from keel.workflows.standing import parse_conditions
    from keel.workflows.standing_bounds import TOTAL_OPS

    bounds: dict[str, Any] = {}
    given = [
        flag
        for flag, name in (("--max-uses", "max_uses"), ("--for", "for_"), ("--total", "total"))
        if getattr(args, name, None) is not None
    ]
    if given and not always:
        raise UsageError(f"{', '.join(given)} bound a standing approval: add --always")
    if getattr(args, "max_uses", None) is not None:
        if args.max_uses < 1:
            raise UsageError(f"--max-uses {args.max_uses}: at least 1")
        bounds["max_uses"] = args.max_uses
    if getattr(args, "for_", None) is not None:
        bounds["for_s"] = parse_duration(args.for_, "--for").total_seconds()
    text = getattr(args, "total", None)
    if text is not None:
        try:
            tests = parse_conditions(text)
        except ValueError as err:
            raise UsageError(f"--total: {err}") from None
        total, value = tests[0], tests[0].value
        number = isinstance(value, int | float) and not isinstance(value, bool)
        number = number and math.isfinite(value)
        if len(tests) > 1 or total.op not in TOTAL_OPS or not number or value <= 0:
            raise UsageError(
                f"--total {text!r}: write FIELD <= LIMIT or FIELD < LIMIT, "
                "with a positive number as the limit ('amount <= 100')"
            )
        bounds["total"] = total
    return bounds


def within_limits(value: object) -> None:
    """Refuse, before anything is sent, a value the session would refuse for its size.

    Raises:
        UsageError: naming the field and its limit (``keel.workflows.limits``).
    """
    from keel.worker.cli.run_inputs import UsageError
    from keel.workflows.limits import InputRejected, check_input

    try:
        check_input(value)
    except InputRejected as err:
        raise UsageError(str(err)) from None


def add_parser(sub: flags.Subparsers) -> None:
    """The turn commands, on the ``keel`` parser's subparsers.

    ``run``, ``wait``, ``approve``, ``deny``, ``respond``, ``keygen``, ``steer``, ``cancel``.
    """
    _add_run(sub)
    _add_wait(sub)
    _add_decisions(sub)
    _add_keygen(sub)
    _add_guidance(sub)


def _add_run(sub: flags.Subparsers) -> None:
    run = sub.add_parser("run", help="send a prompt to a session and wait for the turn")
    run.add_argument("prompt", nargs="+", help="the prompt text")
    run.add_argument("--session", type=flags.session_id, help="session id (default: a new one)")
    run.add_argument(
        "--port",
        type=flags.port,
        help="port of the Temporal dev server keel run starts when none is known "
        "(default: a free one)",
    )
    flags.add_session_flags(run)
    flags.mcp_flag(run)
    run.add_argument("--messages", help="JSON file of history to import into a new session")
    run.add_argument(
        "--detach",
        action="store_true",
        help="send the prompt and return at once, printing the session id (`keel wait` "
        "follows it later); needs a Temporal that outlives the command (`keel dev`)",
    )
    flags.waiting_flags(run)
    run.set_defaults(handler=cmd_run)


def _add_wait(sub: flags.Subparsers) -> None:
    wait = sub.add_parser(
        "wait",
        help="wait for a session's latest turn and print it like run",
        description="Wait until the session's latest turn ends or needs a person, then print "
        "what `keel run` would have printed, with the same exit codes; 124 on --timeout.",
    )
    wait.add_argument("session", type=flags.session_id)
    wait.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="give up after this long (exit 124)"
    )
    flags.waiting_flags(wait)
    flags.mcp_flag(wait, embedded=True)
    wait.set_defaults(handler=cmd_wait)


def _add_decisions(sub: flags.Subparsers) -> None:
    """``keel approve``, ``deny`` and ``respond``."""
    for name, decision in (("approve", "approve"), ("deny", "deny")):
        cmd = sub.add_parser(name, help=f"{name} a pending interrupt, then wait like run")
        cmd.add_argument("session", type=flags.session_id)
        cmd.add_argument("id", help="the interrupt id (see keel pending)")
        cmd.add_argument("--reason", help="why; the model sees it when denied")
        cmd.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
        if name == "approve":
            cmd.add_argument(
                "--always",
                action="store_true",
                help="also approve the tool's later calls in this session (see keel policy)",
            )
            cmd.add_argument(
                "--always-when",
                metavar="TESTS",
                help='--always, for calls whose input passes TESTS: path startswith "docs/"',
            )
            cmd.add_argument(
                "--extend",
                type=float,
                metavar="N",
                help="approving a budget: grant N more model calls, tokens or dollars "
                "(default: as much as the cap again)",
            )
            cmd.add_argument(
                "--max-uses",
                type=int,
                metavar="N",
                help="with --always: it covers N later calls at most, then the next asks",
            )
            cmd.add_argument(
                "--for",
                dest="for_",
                metavar="DURATION",
                help="with --always: it ends after DURATION (90s, 30m, 1h, 1d)",
            )
            cmd.add_argument(
                "--total",
                metavar="LIMIT",
                help="with --always: a running total of a numeric field of the calls it "
                "covers, 'amount <= 100'; a call that would go past it asks",
            )
        flags.key_flag(cmd)
        flags.waiting_flags(cmd)
        flags.mcp_flag(cmd, embedded=True)
        cmd.set_defaults(handler=cmd_decide, decision=decision)

    answer = sub.add_parser("respond", help="answer a tool's question, then wait like run")
    answer.add_argument("session", type=flags.session_id)
    answer.add_argument("id", help="the question's interrupt id (see keel pending)")
    answer.add_argument("value", help="the answer: JSON if it parses as JSON, else text")
    answer.add_argument("--approver", help="your identity (default: KEEL_APPROVER or user name)")
    flags.key_flag(answer)
    flags.waiting_flags(answer)
    flags.mcp_flag(answer, embedded=True)
    answer.set_defaults(handler=cmd_respond)


def _add_keygen(sub: flags.Subparsers) -> None:
    keygen = sub.add_parser(
        "keygen",
        help="make an approver key pair; prints the public key last",
        description="Write an Ed25519 private key (PEM, mode 0600) and print its public key, "
        "for `keel run --approver-key NAME=PUBLIC_KEY`.",
    )
    keygen.add_argument("name", help="the approver's name")
    keygen.add_argument("--out", metavar="FILE", help="where to write it (default: NAME.key)")
    keygen.set_defaults(handler=cmd_keygen)


def _add_guidance(sub: flags.Subparsers) -> None:
    """``keel steer`` and ``cancel``: what changes the running turn."""
    steer = sub.add_parser("steer", help="add guidance to the turn in progress")
    steer.add_argument("session", type=flags.session_id)
    steer.add_argument("text", nargs="+")
    flags.mcp_flag(steer, embedded=True)
    steer.set_defaults(handler=cmd_steer)

    cancel = sub.add_parser("cancel", help="cancel the running turn of a session")
    cancel.add_argument("session", type=flags.session_id)
    cancel.add_argument("--reason", default="cancelled by user")
    flags.waiting_flags(cancel)
    flags.mcp_flag(cancel, embedded=True)
    cancel.set_defaults(handler=cmd_cancel)
