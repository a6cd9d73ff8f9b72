"""Client-side tools, run on the user's machine: ``ClientTools`` (``keel attach``, ``KeelClient``).

A tool declared ``@tool(runs_on="client")`` is a contract on the workers and a body here. A
client attached to a session imports the same tool modules, asks the session which calls
wait (the ``client_calls`` query: queries write nothing to the session's history), runs each
call of a tool it serves in this process, and delivers the result with the update
``tool_result`` (``ClientResult``: the call id, the idempotency key ``<session>/<toolUseId>``
and the tool's output, or its error). The session checks what it is given
(``keel.workflows.client_tools``); the client checks the output against the declared type
before it sends it, too.

A client that stops and starts again finds the calls still waiting. A result delivered twice
counts once: the update's id is the call's idempotency key, and the session answers the same
result again without applying it. Two clients attached to one session may both run a call;
the session takes the first result and refuses another.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from keel.activities.tools import (
    RegisteredTool,
    ToolContext,
    ToolInterrupted,
    ToolModuleError,
    load_tool_modules,
    registered_tools,
)
from keel.worker.client.calls import SessionCaller, settling
from keel.worker.client.errors import NoWorker, RequestRejected, SessionNeverRan
from keel.workflows.client_tools import UnknownClientCall
from keel.workflows.contracts import ClientCall, ClientResult, ClientResultAck
from keel.workflows.limits import CLIENT_ERROR_BYTES, InputRejected, check_client_result
from keel.workflows.session import AgentSession

logger = logging.getLogger(__name__)

# How often ``serve`` asks the session for waiting calls, and checks that it still runs.
POLL_S = 0.5
LIVENESS_EVERY_S = 5.0
# A poll that no worker answers within this long is given up, and asked again.
QUERY_TIMEOUT = timedelta(seconds=10)
# A delivery that could not reach the session (Temporal, no worker) is tried again this often.
_DELIVERY_RETRY_S = (0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class ServedCall:
    """A call this client ran, and what became of its result: what ``on_call`` hears.

    Attributes:
        call: the call, as the session published it.
        error: the tool's failure on this machine (delivered as the call's error), if any.
        ack: the session's answer to the delivery; None when it refused it.
        refused: why the session refused the result (a timed-out call, say).
    """

    call: ClientCall
    error: str | None
    ack: ClientResultAck | None
    refused: str | None = None


class ClientTools(SessionCaller):
    """Runs a session's client-side tool calls here and delivers their results.

    Client-side tools are ``@tool(runs_on="client")``; ``KeelClient`` is one of these.
    """

    async def client_calls(self, session_id: str) -> list[ClientCall]:
        """The calls of client-side tools that wait for a client, oldest first."""
        try:
            view = await self._ask(
                session_id,
                lambda: self.handle(session_id).query(
                    AgentSession.client_calls, rpc_timeout=self.query_timeout or QUERY_TIMEOUT
                ),
            )
        except SessionNeverRan:  # Temporal ended it before it ran: nothing waits
            return []
        return view.calls

    async def tool_result(
        self,
        session_id: str,
        call_id: str,
        idempotency_key: str,
        *,
        output: Any = None,
        error: str | None = None,
        client: str | None = None,
        update_id: str | None = None,
    ) -> ClientResultAck:
        """Deliver a client-side tool's result (the validated ``tool_result`` update).

        Args:
            session_id: the session.
            call_id: the call (``ClientCall.id``).
            idempotency_key: the call's ``idempotency_key``.
            output: the tool's return value, as JSON.
            error: the tool failed: what the model is told.
            client: a name for this client, for the session's event log.
            update_id: the update's id; default the idempotency key, so that a delivery
                sent again is the same update.

        Raises:
            RequestRejected: the session refused it: the call is unknown, ended or timed
                out, the key is not the call's, or the result is not JSON or too large;
                nothing was written to the session's history.
        """
        result = ClientResult(
            call_id=call_id,
            idempotency_key=idempotency_key,
            output=output,
            error=error,
            client=client,
        )
        try:  # refused before it is sent, as the session would refuse it
            check_client_result(result)
        except InputRejected as err:
            raise RequestRejected(str(err), kind=InputRejected.__name__) from err
        update = update_id or idempotency_key

        async def send() -> ClientResultAck:
            return await self._ask(
                session_id,
                lambda: self.handle(session_id).execute_update(
                    AgentSession.tool_result, result, id=update
                ),
                query=False,
            )

        return await settling(send, UnknownClientCall.__name__)

    async def serve_tools(
        self,
        session_id: str,
        modules: Sequence[str | ModuleType],
        *,
        poll_s: float = POLL_S,
        client: str | None = None,
        stop_after: int | None = None,
        on_call: Callable[[ServedCall], None] | None = None,
    ) -> int:
        """Run the session's calls of client-side tools in this process, until it ends.

        What ``keel attach SESSION --tools MODULE`` does: ask the session for waiting calls,
        run those of the tools ``modules`` define as ``@tool(runs_on="client")``, and deliver
        each result (``tool_result``). Cancel the task to stop; the calls left wait for the
        next client.

        Args:
            session_id: the session to serve.
            modules: the tool modules (names, as ``--tools`` takes them, or modules) whose
                ``@tool(runs_on="client")`` functions this client runs.
            poll_s: how often to ask the session for waiting calls.
            client: a name for this client, for the session's event log.
            stop_after: return once this many calls were served.
            on_call: told of each call served, and of what the session answered.

        Returns:
            How many calls were served (once the session ended, or ``stop_after`` were).

        Raises:
            ToolModuleError: a module cannot be imported or has no client-side tools.
            SessionNotFound: no such session.
        """
        tools = client_side_tools(modules)
        running: dict[str, asyncio.Task[ServedCall]] = {}
        served: set[str] = set()
        skipped: set[str] = set()
        loop = asyncio.get_running_loop()
        checked = loop.time()

        def finished(call_id: str, task: asyncio.Task[ServedCall]) -> None:
            del running[call_id]
            if task.cancelled():
                return
            served.add(call_id)
            if on_call is not None:
                on_call(task.result())

        try:
            while stop_after is None or len(served) < stop_after:
                try:
                    calls = await self.client_calls(session_id)
                except NoWorker as err:  # no worker answers for now: the calls wait, so do we
                    logger.warning("%s; asking again", err)
                    calls = []
                for call in calls:
                    if call.id in running or call.id in served:
                        continue
                    entry = tools.get(call.tool_use.name)
                    if entry is None:
                        if call.id not in skipped:
                            skipped.add(call.id)
                            logger.warning(
                                "session %s waits for tool %r, which this client does not serve",
                                session_id,
                                call.tool_use.name,
                            )
                        continue
                    task = asyncio.create_task(self._serve_one(session_id, entry, call, client))
                    task.add_done_callback(functools.partial(finished, call.id))
                    running[call.id] = task
                if stop_after is not None and len(served) >= stop_after:
                    break
                if not calls and not running and loop.time() - checked >= LIVENESS_EVERY_S:
                    checked = loop.time()
                    status = await self.status(session_id)
                    if status != WorkflowExecutionStatus.RUNNING:
                        break
                await asyncio.sleep(poll_s)
        finally:
            for task in list(running.values()):
                task.cancel()
        return len(served)

    async def _serve_one(
        self, session_id: str, entry: RegisteredTool, call: ClientCall, client: str | None
    ) -> ServedCall:
        """Run one call here and deliver its result; tell what became of it."""
        output, error = await run_here(entry, call, session_id)
        if error is not None and len(error.encode()) > CLIENT_ERROR_BYTES:
            cut = error.encode()[: CLIENT_ERROR_BYTES - 10].decode(errors="ignore")
            error = f"{cut} [...]"  # the session takes no longer error
        for pause in (*_DELIVERY_RETRY_S, None):
            try:
                ack = await self.tool_result(
                    session_id,
                    call.id,
                    call.idempotency_key,
                    output=output,
                    error=error,
                    client=client,
                )
                return ServedCall(call=call, error=error, ack=ack)
            except RequestRejected as err:
                return ServedCall(call=call, error=error, ack=None, refused=str(err))
            except (RPCError, NoWorker) as err:
                if pause is None:
                    return ServedCall(call=call, error=error, ack=None, refused=str(err))
                logger.info("delivering call %s failed (%s); trying again", call.id, err)
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")


def client_side_tools(modules: Sequence[str | ModuleType]) -> dict[str, RegisteredTool]:
    """The client-side tools of ``modules`` (imported now), by name.

    Raises:
        ToolModuleError: a module cannot be imported or defines no client-side tool.
    """
    names = [m.__name__ if isinstance(m, ModuleType) else m for m in modules]
    loaded = load_tool_modules(names)
    tools = {
        name: entry
        for name, entry in registered_tools().items()
        if entry.spec.runs_on == "client"
        and any(entry.spec.module == m or entry.spec.module.startswith(m + ".") for m in loaded)
    }
    if not tools:
        raise ToolModuleError(
            f"{', '.join(loaded) or 'no module'} defines no client-side tool "
            "(@tool(runs_on='client'))"
        )
    return tools


async def run_here(
    entry: RegisteredTool, call: ClientCall, session_id: str
) -> tuple[Any, str | None]:
    """Run a client-side tool in this process: its output as JSON, or why it failed.

    The input is validated against the tool's parameters as a worker would, and the return
    value against its declared output type. A sync tool runs in a thread.
    """
    use = call.tool_use
    try:
        args = entry.input_model.model_validate(use.input)
    except ValidationError as err:
        return None, f"invalid input for tool {use.name!r}: {_compact(err)}"
    kwargs = {name: getattr(args, name) for name in type(args).model_fields}
    context = ToolContext(
        session_id=session_id, tool_use_id=use.toolUseId, idempotency_key=call.idempotency_key
    )
    positional: tuple[Any, ...] = (context,) if entry.takes_context else ()
    try:
        if entry.is_async:
            value = await entry.fn(*positional, **kwargs)
        else:
            value = await asyncio.to_thread(entry.fn, *positional, **kwargs)
    except ToolInterrupted as asked:
        return None, f"asked a question ({asked.name!r}), which a client-side tool cannot ask"
    except Exception as exc:  # noqa: BLE001 - any failure of the tool goes to the model
        logger.warning("client-side tool %r failed: %s", use.name, exc, exc_info=True)
        return None, f"{type(exc).__name__}: {exc}"
    assert entry.output is not None  # a client-side tool has its output type
    try:
        checked = entry.output.validate_python(value)
    except ValidationError as err:
        return None, (
            f"returned a value that does not match its declared output type: {_compact(err)}"
        )
    return entry.output.dump_python(checked, mode="json"), None


def _compact(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in err.errors()
    )
