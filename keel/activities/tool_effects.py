"""Effects happen once, or a person decides: the tool activity's side of effect classes.

A tool declares what running it again does (``@tool(effect=...)``; an MCP tool's annotations;
a session's ``tool_effects``). A ``read`` tool runs as it always did. A ``write`` or
``idempotent`` tool's call is journaled (``keel.activities.effects_journal``) and settled
before its body runs:

- the call has a result in the journal (a lost response, a ``temporal workflow reset``): that
  result is the answer, and nothing runs (``recorded``);
- an earlier attempt began the body and never said how it ended (its worker died, its
  heartbeat or timeout ran out), and no person has settled it since:
  an ``idempotent`` tool runs again (``retried``); a ``write`` tool does not: its
  ``reconcile`` tells whether the effect happened (a result: ``reconciled``; None: it runs
  again, ``retried``), and without one (or when it raises) the activity answers
  ``outcome == "unknown"`` and the session asks a person (``outcome_unknown``);
- else the body runs, its start journaled before it and its end after it.

Only a run that was not plain (``retried``, ``recorded``, ``reconciled``, ``unknown``) reports
to the session (``ToolResponse.effect``): a plain call's attempt stays in the journal, out of
workflow history, and ``keel effects`` reads it there.

A tool that overran its own timeout (``@tool(timeout_s=...)``) ended with a known answer: the
model is told it timed out (and may call it again, as a new call); nothing runs it again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keel.activities.effects_journal import UNKNOWN_ENDS, EffectJournal
from keel.activities.tools import ToolContext
from keel.workflows.activity_contracts import ToolRequest, ToolResponse
from keel.workflows.contracts import Effect
from keel.workflows.effect_contracts import (
    AttemptEnd,
    EffectAttempt,
    EffectOutcome,
    EffectReport,
)

if TYPE_CHECKING:
    from keel.activities.mcp.servers import McpTool
    from keel.activities.tools import RegisteredTool

__all__ = ["BodyEnd", "call_of", "journaled_effect", "reconciled", "run_journaled"]

logger = logging.getLogger(__name__)

# Runs the tool's body as attempt N, telling ``BodyEnd`` how it ended.
Body = Callable[[int, "BodyEnd"], Awaitable[ToolResponse]]
# Asks the tool's ``reconcile``: its result when the effect happened, None when it did not.
Reconcile = Callable[[int], Awaitable[ToolResponse | None]]


@dataclass
class BodyEnd:
    """How a tool's body ended, as ``run_tool`` saw it (None: it did not say)."""

    how: AttemptEnd | None = None


def journaled_effect(
    request: ToolRequest, entry: RegisteredTool | None, remote: McpTool | None
) -> Effect | None:
    """The effect class a call is journaled under; None for one that is not journaled.

    Not journaled: a ``read`` tool, a client-side tool's result (the client ran it), and a
    tool this worker does not know (its error result says so).
    """
    if request.client_output is not None:
        return None
    if remote is not None:
        declared: Effect = remote.spec.effect
    elif entry is not None and entry.spec.runs_on == "worker":
        declared = entry.spec.effect
    else:
        return None
    effect = request.effect or declared
    return None if effect == "read" else effect


async def run_journaled(
    request: ToolRequest,
    effect: Effect,
    journal: EffectJournal,
    body: Body,
    reconcile: Reconcile | None,
) -> ToolResponse:
    """Run a journaled call, unless its journal says it must not run (see the module).

    Raises:
        Exception: the store could not be read or written (Temporal retries the attempt), or
            the body's own failures that ``run_tool`` raises (a lost MCP connection).
    """
    state = await asyncio.to_thread(journal.read)
    if state.done is not None:
        response = ToolResponse.model_validate(state.done)
        return _reported(response, effect, "recorded", state.attempts)
    unsettled = state.unsettled(request.settled_attempts or 0)
    last = describe(unsettled[-1]) if unsettled else None
    outcome: EffectOutcome = "done"
    if unsettled:
        if effect == "write":
            found = await _settle(journal, reconcile, state.attempts, last)
            if found is not None:
                return found
        outcome = "retried"
    elif request.settled_attempts and any(a.ended in UNKNOWN_ENDS for a in state.attempts):
        outcome = "retried"  # a person approved running it again
    number = len(state.attempts) + 1
    attempt = await asyncio.to_thread(journal.start, number, _worker())
    ending = BodyEnd()
    try:
        response = await body(number, ending)
    except BaseException:
        if ending.how is not None:
            await asyncio.shield(_end_quietly(journal, attempt, ending.how))
        raise  # without an end: the next attempt finds the outcome unknown
    ended = await asyncio.to_thread(journal.end, attempt, ending.how or "returned")
    attempts = [*state.attempts, ended]
    if response.result is not None:
        await asyncio.to_thread(journal.finish, response.model_dump(mode="json"))
    if outcome == "done":
        return response  # the common case: the journal holds its attempt, history nothing more
    return _reported(response, effect, outcome, attempts, last)


def call_of(
    entry: RegisteredTool, request: ToolRequest, attempt: int
) -> tuple[ToolContext, dict[str, Any]]:
    """The ``ctx`` and the keyword arguments a call of the tool (or its reconcile) gets.

    Raises:
        ValidationError: the input does not fit the tool's parameters.
    """
    use = request.tool_use
    args = entry.input_model.model_validate(use.input)
    kwargs = {field: getattr(args, field) for field in type(args).model_fields}
    ctx = ToolContext(
        session_id=request.session_id,
        tool_use_id=use.toolUseId,
        idempotency_key=request.idempotency_key,
        answers=request.answers,
        attempt=attempt,
    )
    return ctx, kwargs


async def reconciled(
    entry: RegisteredTool,
    request: ToolRequest,
    finish: Callable[[Any], ToolResponse],
    attempts: int,
) -> ToolResponse | None:
    """Ask a ``write`` tool's ``reconcile`` whether its effect happened.

    It gets the tool's arguments (and ``ctx`` when the tool takes one): a value other than
    None is the tool's result, made a response by ``finish`` (which keeps it as a result of the
    tool is); None means it did not happen.

    Raises:
        Exception: reconcile raised, or the input does not fit the tool (a person decides).
    """
    assert entry.reconcile is not None
    ctx, kwargs = call_of(entry, request, attempts)
    call = functools.partial(entry.reconcile, *((ctx,) if entry.takes_context else ()), **kwargs)
    if asyncio.iscoroutinefunction(entry.reconcile):
        value = await call()
    else:
        value = await asyncio.to_thread(contextvars.copy_context().run, call)
    if value is None:
        return None
    return await asyncio.to_thread(finish, value)


async def _settle(
    journal: EffectJournal,
    reconcile: Reconcile | None,
    attempts: list[EffectAttempt],
    last: str | None,
) -> ToolResponse | None:
    """Settle a ``write`` call whose effect may have happened without a person, if it can.

    Returns:
        The response to answer with (``reconciled``, or ``unknown`` for a person); None when
        ``reconcile`` found that the effect did not happen and the tool may run again.
    """
    if reconcile is None:
        return _unknown(attempts, last)
    try:
        found = await reconcile(len(attempts))
    except Exception as err:  # noqa: BLE001 - the person is told why reconcile could not tell
        logger.warning("reconcile failed, asking a person: %s", err, exc_info=True)
        return _unknown(attempts, last, f"{type(err).__name__}: {err}")
    if found is None:
        return None
    await asyncio.to_thread(journal.finish, found.model_dump(mode="json"))
    return _reported(found, "write", "reconciled", attempts, last)


def _unknown(
    attempts: list[EffectAttempt], last: str | None, error: str | None = None
) -> ToolResponse:
    report = EffectReport(
        effect="write",
        outcome="unknown",
        attempts=attempts,
        last_ended=last,
        reconcile_error=error,
    )
    return ToolResponse(result=None, effect=report)


def _reported(
    response: ToolResponse,
    effect: Effect,
    outcome: EffectOutcome,
    attempts: list[EffectAttempt],
    last: str | None = None,
) -> ToolResponse:
    report = EffectReport(effect=effect, outcome=outcome, attempts=attempts, last_ended=last)
    return response.model_copy(update={"effect": report})


def describe(attempt: EffectAttempt) -> str:
    """How an attempt whose outcome is unknown ended, in words."""
    where = f" on {attempt.worker}" if attempt.worker else ""
    began = f"attempt {attempt.attempt} (started {attempt.started_at}{where})"
    if attempt.ended == "timed_out":
        return f"{began} ran past the tool's timeout: its body may still have run"
    if attempt.ended == "cancelled":
        return f"{began} was cancelled while it ran"
    return (
        f"{began} ended without a result: its worker stopped, or its heartbeat or "
        "Temporal's timeout ran out"
    )


async def _end_quietly(journal: EffectJournal, attempt: EffectAttempt, how: AttemptEnd) -> None:
    try:
        await asyncio.to_thread(journal.end, attempt, how)
    except Exception as err:  # noqa: BLE001 - the attempt fails anyway; its end stays unknown
        logger.warning("cannot journal how attempt %s ended: %s", attempt.attempt, err)


def _worker() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"
