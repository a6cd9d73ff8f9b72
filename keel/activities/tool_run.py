"""The tool activity: run one tool call.

A tool's failure is the model's business, not Temporal's: an unknown tool, invalid input, an
exception, a timeout or an unusable return value all become an error toolResult, and the
activity completes. The activity fails only when it is cancelled or its worker is lost.

A client-side tool (``@tool(runs_on="client")``) is never run here: the activity is given
what a client delivered (``ToolRequest.client_output``), checks it against the tool's declared
output type and makes it the result (``keel.workflows.client_tools``).

Sync tools run in a dedicated thread pool so the event loop (and with it heartbeats and
cancellation) is never blocked. A thread cannot be killed: a sync tool that times out or whose
activity is cancelled keeps running in its thread until it returns; its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import typing
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from temporalio import activity

from keel.activities.effects_journal import EffectJournal
from keel.activities.heartbeats import LoopHeartbeats
from keel.activities.mcp.config import McpTransportError
from keel.activities.store import ConversationStore
from keel.activities.tool_effects import (
    BodyEnd,
    call_of,
    journaled_effect,
    reconciled,
    run_journaled,
)
from keel.activities.tools import (
    RegisteredTool,
    ToolContext,
    ToolInterrupted,
    get_tool,
    registered_tools,
)
from keel.workflows.activity_contracts import ToolQuestion, ToolRequest, ToolResponse
from keel.workflows.activity_options import TOOL_ACTIVITY, heartbeat_every_s
from keel.workflows.messages import ToolResult, ToolResultContent, error_result

if TYPE_CHECKING:
    from keel.activities.mcp.servers import McpServers, McpTool

__all__ = ["ToolActivities", "run_tool"]

# A running tool beats three times per heartbeat timeout, at most this long apart, as a model
# call does: its beats only tell Temporal it lives (a cancel reaches it through the question
# ``keel.activities.heartbeats`` asks every second). At 5 s, a 5 s tool paid a beat (an
# Action) that a 30 s timeout does not need.
_HEARTBEAT_EVERY_S = 10.0
# One tool result must fit a Temporal payload (2 MB) with room for the rest of the request.
MAX_RESULT_BYTES = 1_000_000
_SYNC_TOOL_THREADS = 32
_executor: ThreadPoolExecutor | None = None


class ToolActivities:
    """The tool activity bound to the worker's conversation store.

    The result is stored, and the activity answers with its digest and, for a successful
    result, the result without its content: a tool's output never enters workflow history.
    The next model call names it by digest, and the model activity reads it back from the
    store.
    """

    def __init__(self, store: ConversationStore, mcp: McpServers | None = None) -> None:
        """Use a store for tool results; run the MCP servers' tools on ``mcp``."""
        self.store = store
        self.mcp = mcp

    @activity.defn(name=TOOL_ACTIVITY)
    async def run(self, request: ToolRequest) -> ToolResponse:
        """Run one tool call (see ``run_tool``) and store its result.

        A tool's result is stored in the thread that ran the (sync) tool, after an async one
        in a worker thread: never on the event loop. An error result the activity made itself
        travels inline. A ``write`` or ``idempotent`` tool's call is journaled, and one whose
        earlier attempt may have had its effect is settled before anything runs
        (``keel.activities.tool_effects``).

        Raises:
            asyncio.CancelledError: the activity was cancelled.
        """
        attempt = activity.info().attempt
        entry = get_tool(request.tool_use.name)
        remote = self.mcp.get(request.tool_use.name) if self.mcp is not None else None
        effect = journaled_effect(request, entry, remote)
        if effect is None:
            response = await run_tool(request, keep=self._keep, mcp=self.mcp, attempt=attempt)
            return response.model_copy(update={"attempt": attempt}) if attempt > 1 else response

        def body(number: int, ending: BodyEnd) -> Awaitable[ToolResponse]:
            return run_tool(request, keep=self._keep, mcp=self.mcp, attempt=number, ending=ending)

        journal = EffectJournal(self.store.backend, request.idempotency_key)
        reconcile = None
        if entry is not None and remote is None and entry.reconcile is not None:
            use = request.tool_use
            finish = functools.partial(_finish, use.name, use.toolUseId, self._keep)
            reconcile = functools.partial(reconciled, entry, request, finish)
        return await run_journaled(request, effect, journal, body, reconcile)

    def _keep(self, response: ToolResponse) -> ToolResponse:
        """Store a tool's result; the response names it by digest.

        A successful result leaves its content out; an error result keeps it (it is short,
        and it is what someone reading the history or a trace looks for).
        """
        result = response.result
        assert result is not None
        digest = self.store.put_document({"toolResult": result.model_dump(mode="json")})
        if result.status == "error":
            return ToolResponse(result=result, digest=digest)
        return ToolResponse(result=result.model_copy(update={"content": []}), digest=digest)


async def run_tool(
    request: ToolRequest,
    keep: Callable[[ToolResponse], ToolResponse] | None = None,
    mcp: McpServers | None = None,
    attempt: int = 1,
    ending: BodyEnd | None = None,
) -> ToolResponse:
    """Run one tool call and turn its outcome into a toolResult.

    One function on purpose (past 80 lines): the steps of one tool run, in the order they happen,
    read top-down.

    Args:
        request: the tool use, its session, idempotency key and timeout (seconds, enforced
            here; zero or less means none).
        keep: called with the response built from the tool's return value; its answer is
            returned instead.
        mcp: the worker's MCP servers; a tool of theirs is called on its server.
        attempt: which run of the tool's body this is (``ToolContext.attempt``).
        ending: told how the tool's body ended (returned, raised, asked, timed out,
            cancelled); left unset when the attempt fails without knowing.

    Returns:
        The toolResult: ``success`` with the tool's output, or ``error`` with why it failed.

    Raises:
        asyncio.CancelledError: the activity was cancelled; the tool's task is cancelled too.
        McpTransportError: an MCP tool's server could not be reached or its connection broke:
            the attempt fails and Temporal retries it, on a new connection.
    """
    use = request.tool_use
    remote = mcp.get(use.name) if mcp is not None else None
    job: Awaitable[ToolResponse]
    if remote is not None:
        assert mcp is not None
        if not isinstance(use.input, dict):
            return _error(use.toolUseId, f"invalid input for tool {use.name!r}: not an object")
        job = _invoke_mcp(mcp, remote, request, keep)
    else:
        entry = get_tool(use.name)
        if entry is None:
            known = ", ".join(sorted([*registered_tools(), *_mcp_names(mcp)])) or "(no tools)"
            return _error(use.toolUseId, f"unknown tool {use.name!r}; this session has: {known}")
        if entry.spec.runs_on == "client" or request.client_output is not None:
            return await _client_result(entry, request, keep)
        try:
            ctx, kwargs = call_of(entry, request, attempt)
        except ValidationError as err:
            return _error(use.toolUseId, f"invalid input for tool {use.name!r}: {_compact(err)}")
        finish = functools.partial(_finish, use.name, use.toolUseId, keep)
        job = _invoke(entry, ctx, kwargs, finish)
    timeout = request.timeout_s if request.timeout_s > 0 else None
    task = asyncio.ensure_future(job)
    task.add_done_callback(_drain)
    heartbeats = LoopHeartbeats(_heartbeat_every_s(), _beat)
    ending = ending if ending is not None else BodyEnd()
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        ending.how = "cancelled"
        raise
    finally:
        heartbeats.stop()
    if not done:
        task.cancel()
        ending.how = "timed_out"
        activity.logger.warning("tool %r timed out after %s s", use.name, _secs(timeout))
        return _error(use.toolUseId, f"tool {use.name!r} timed out after {_secs(timeout)} s")
    try:
        response = task.result()
    except _KeepFailed as failed:  # the store, not the tool: fail the attempt, Temporal retries
        raise failed.error from None
    except McpTransportError as lost:  # the connection, not the tool: Temporal retries
        activity.logger.warning("tool %r: %s", use.name, lost)
        raise
    except ToolInterrupted as asked:
        ending.how = "asked"
        activity.logger.info("tool %r asks %r", use.name, asked.name)
        return ToolResponse(
            result=None, question=ToolQuestion(name=asked.name, reason=asked.reason)
        )
    except asyncio.CancelledError:
        # The tool cancelled itself; the activity was not cancelled.
        ending.how = "raised"
        return _error(use.toolUseId, f"tool {use.name!r} failed: CancelledError")
    except Exception as exc:  # noqa: BLE001 - any tool failure goes back to the model
        ending.how = "raised"
        activity.logger.warning("tool %r failed: %s", use.name, exc, exc_info=True)
        return _error(use.toolUseId, f"tool {use.name!r} failed: {type(exc).__name__}: {exc}")
    ending.how = "returned"
    return response


class _KeepFailed(Exception):
    """``keep`` failed: told apart from the tool's own failures, which go to the model."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _finish(
    name: str,
    tool_use_id: str,
    keep: Callable[[ToolResponse], ToolResponse] | None,
    value: Any,
) -> ToolResponse:
    """The response for a tool's return value: its toolResult, or why it cannot be one."""
    content = _content(value)
    if content is None:
        return _error(
            tool_use_id,
            f"tool {name!r} returned a value that is not JSON-serialisable: {type(value).__name__}",
        )
    return _checked(name, keep, ToolResult(toolUseId=tool_use_id, content=content))


def _checked(
    name: str, keep: Callable[[ToolResponse], ToolResponse] | None, result: ToolResult
) -> ToolResponse:
    """The response for a tool's result: kept, or an error when it is over the size limit."""
    tool_use_id = result.toolUseId
    response = ToolResponse(result=result)
    size = len(response.model_dump_json())
    if size > MAX_RESULT_BYTES:
        return _error(
            tool_use_id,
            f"tool {name!r} returned {size:,} bytes, over Keel's limit of "
            f"{MAX_RESULT_BYTES:,} bytes for one result (Temporal caps a payload at 2 MB); "
            "return less, or a reference to where the data is",
        )
    if keep is None:
        return response
    try:
        return keep(response)
    except Exception as err:
        raise _KeepFailed(err) from err


async def _invoke(
    entry: RegisteredTool,
    ctx: ToolContext,
    kwargs: dict[str, Any],
    finish: Callable[[Any], ToolResponse],
) -> ToolResponse:
    """Call the tool, then ``finish`` its value (which stores it: blocking I/O).

    A sync tool does both in one pool thread; an async one runs on the loop, and ``finish``
    in a thread after it.
    """
    args: tuple[Any, ...] = (ctx,) if entry.takes_context else ()
    if entry.is_async:
        value = await entry.fn(*args, **kwargs)
        return await asyncio.to_thread(finish, value)

    def call() -> ToolResponse:
        return finish(entry.fn(*args, **kwargs))

    # Copy the context so a sync tool can still call temporalio.activity functions.
    bound = functools.partial(contextvars.copy_context().run, call)
    return await asyncio.get_running_loop().run_in_executor(_sync_executor(), bound)


async def _client_result(
    entry: RegisteredTool,
    request: ToolRequest,
    keep: Callable[[ToolResponse], ToolResponse] | None,
) -> ToolResponse:
    """The result of a client-side tool: what a client delivered, if it fits the declared type.

    The output is validated (strict, as JSON) against the tool's return annotation, and what
    the model sees is the validated value; a failure the client reported, or an output that
    does not match, is an error result that says so.

    Raises:
        Exception: the store failed (Temporal retries the attempt).
    """
    use, delivered = request.tool_use, request.client_output
    if entry.spec.runs_on != "client" or entry.output is None:
        return _error(use.toolUseId, f"tool {use.name!r} is not a client-side tool")
    if delivered is None:
        return _error(
            use.toolUseId,
            f"tool {use.name!r} runs on the user's machine (runs_on='client'); no worker runs it",
        )
    if delivered.error is not None:
        return _error(use.toolUseId, f"tool {use.name!r} failed on the client: {delivered.error}")
    try:
        value = entry.output.validate_json(json.dumps(delivered.value), strict=True)
    except (ValidationError, TypeError, ValueError) as err:
        why = _compact(err) if isinstance(err, ValidationError) else str(err)
        return _error(
            use.toolUseId,
            f"the client's result for tool {use.name!r} does not match its declared output "
            f"type {_output_name(entry)}: {why}",
        )
    output = entry.output.dump_python(value, mode="json")
    try:
        return await asyncio.to_thread(_finish, use.name, use.toolUseId, keep, output)
    except _KeepFailed as failed:  # the store, not the client: fail the attempt, Temporal retries
        raise failed.error from None


def _output_name(entry: RegisteredTool) -> str:
    """The declared output type of a tool, as its return annotation reads."""
    returns = typing.get_type_hints(entry.fn).get("return", Any)
    if typing.get_origin(returns) is None and hasattr(returns, "__name__"):
        return str(returns.__name__)
    return repr(returns).replace("typing.", "")


async def _invoke_mcp(
    mcp: McpServers,
    tool: McpTool,
    request: ToolRequest,
    keep: Callable[[ToolResponse], ToolResponse] | None,
) -> ToolResponse:
    """Call an MCP tool on its server; its result (``isError`` an error one) is kept as usual.

    A JSON-RPC error from the server is a tool failure (an error result, by ``run_tool``);
    a broken connection raises ``McpTransportError``.
    """
    from keel.activities.mcp.results import result_content

    use = request.tool_use
    answer = await mcp.call(tool, use.input, request.session_id, request.idempotency_key)
    result = ToolResult(
        toolUseId=use.toolUseId,
        status="error" if answer.is_error else "success",
        content=result_content(answer),
    )
    return await asyncio.to_thread(_checked, use.name, keep, result)


def _mcp_names(mcp: McpServers | None) -> list[str]:
    return [] if mcp is None else [spec.name for spec in mcp.specs()]


def _drain(task: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of an abandoned tool task so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


def _sync_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(_SYNC_TOOL_THREADS, thread_name_prefix="keel-tool")
    return _executor


def _heartbeat_every_s() -> float:
    """How often a running tool heartbeats: three times per heartbeat timeout, at most 10 s."""
    return heartbeat_every_s(activity.info().heartbeat_timeout, _HEARTBEAT_EVERY_S)


def _beat() -> bool:
    activity.heartbeat()
    return True


def _content(value: Any) -> list[ToolResultContent] | None:
    if isinstance(value, str):
        return [ToolResultContent(text=value)]
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        # A null ``json`` block reads as an empty block; say "null" in text instead.
        return [ToolResultContent(text="null")]
    if not isinstance(value, dict | list | int | float | bool):
        return None
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return [ToolResultContent.model_validate({"json": value})]


def _compact(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in err.errors()
    )


def _secs(timeout: float | None) -> str:
    return f"{timeout:g}" if timeout is not None else "?"


def _error(tool_use_id: str, text: str) -> ToolResponse:
    return ToolResponse(result=error_result(tool_use_id, text))
