"""Client-side tools: calls the session publishes, and a client attached to it runs.

A tool declared ``@tool(runs_on="client")`` has a typed contract (input from its type hints,
output from its return annotation) and no body a worker runs. When the model calls it and the
gate let the call through (the tool exists, the turn is not cancelled, the policy allows it, a
person approved it when one must), ``ClientTools.run`` publishes a ``ClientCall`` in the
ledger, shown by the ``client_calls`` and ``pending`` queries, and waits for the update
``tool_result`` (``keel attach``, ``KeelClient.serve_tools``):

- The validator refuses a result for a call id this session did not publish, one with
  another idempotency key than the call's ``<session id>/<toolUseId>`` (another session's
  call), one for a call that ended, timed out or whose turn is being cancelled, and one over
  the size limit (S1: no client can answer a tool use this session's model did not make).
  The same result for the same call again is answered again and applied once.
- A delivered result is checked by a worker against the tool's declared output type: the
  tool activity ``keel.tool.run``, given the result as ``ToolRequest.client_output`` instead
  of running the tool, since only workers hold the tool's types; it stores the result as it
  stores every tool result. A result that does not match becomes an error toolResult that
  says so, and so does a failure the client reports; the call then ends ``invalid`` or
  ``failed``.
- No result within the tool's ``timeout_s``: the model gets the error result "no client ran
  tool X within N s".

The call is in the ledger, so it survives worker crashes and continue-as-new: the session may
continue-as-new while only clients and people are awaited (``AgentSession._can_park``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import (
        ClientOutput,
        ToolRequest,
        ToolResponse,
        idempotency_key,
    )
    from keel.workflows.activity_options import (
        CLIENT_CHECK_TIMEOUT_S,
        TOOL_ACTIVITY,
        TOOL_RETRY,
        heartbeat_timeout,
        tool_start_to_close,
    )
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import (
        ClientCall,
        ClientCallStatus,
        ClientCallsView,
        ClientResult,
        ClientResultAck,
        SessionConfig,
        ToolSpec,
        TurnRecord,
    )
    from keel.workflows.cycle import failure_text, stripped
    from keel.workflows.handlers import UpdateAnswers, expect
    from keel.workflows.ledger import Ledger, PendingCycle
    from keel.workflows.limits import (
        CLIENT_ERROR_BYTES,
        CLIENT_RESULT_BYTES,
        NAME_BYTES,
        NOTE_CHARS,
        text_bytes,
        within,
    )
    from keel.workflows.messages import ToolResult, ToolUse, error_result
    from keel.workflows.status_attribute import short


class UnknownClientCall(InputRejected):
    """A result names no client call of this session.

    Its own type, so that clients can act on it without reading the message: a query can show
    a call before the workflow task that publishes it has run, so a client sends such a result
    again for a moment.
    """


class ClientTools:
    """Publish calls of client-side tools, take their results, and turn them into results."""

    def __init__(
        self,
        config: SessionConfig,
        ledger: Ledger,
        answers: UpdateAnswers,
        tool_calls: dict[str, workflow.ActivityHandle[ToolResponse]],
        show_details: Callable[[], None],
    ) -> None:
        """Keep calls in ``ledger``; checks in flight go into ``tool_calls`` (the gate's)."""
        self._config = config
        self._ledger = ledger
        self._answers = answers
        self._tool_calls = tool_calls
        self._show_details = show_details

    # ----------------------------------------------------------------------------- the gate

    async def run(
        self, record: TurnRecord, pending: PendingCycle, use: ToolUse, spec: ToolSpec
    ) -> ToolResult:
        """Publish the call (or take the one a previous run published) and wait for its result."""
        call = self._call_for(use) or self._publish(record, pending, use, spec)
        if call.status == "waiting":
            await self._wait(call)
        if call.status == "delivered":
            return await self._check(call, pending, use)
        return error_result(use.toolUseId, call.note or f"client call {call.status}")

    def awaiting(self) -> bool:
        """Whether calls wait for a client, and none has a result a worker must check."""
        calls = self._ledger.client_calls.values()
        return any(c.status == "waiting" for c in calls) and not any(
            c.status == "delivered" for c in calls
        )

    def _call_for(self, use: ToolUse) -> ClientCall | None:
        for call in reversed(self._ledger.client_calls.values()):
            if call.tool_use.toolUseId == use.toolUseId:
                return call
        return None

    def _publish(
        self, record: TurnRecord, pending: PendingCycle, use: ToolUse, spec: ToolSpec
    ) -> ClientCall:
        session_id = workflow.info().workflow_id
        expires = workflow.now() + timedelta(seconds=spec.timeout_s)
        call = ClientCall(
            id=str(workflow.uuid4()),
            tool_use=use,
            idempotency_key=idempotency_key(session_id, use.toolUseId),
            turn=record.turn_id,
            cycle=pending.cycle,
            timeout_s=spec.timeout_s,
            expires_at=expires.isoformat(),
        )
        self._ledger.publish_client_call(call)
        return call

    async def _wait(self, call: ClientCall) -> None:
        """Wait until a result is delivered, the call times out or the turn is cancelled."""
        ledger = self._ledger
        self._show_details()
        left = datetime.fromisoformat(call.expires_at) - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: call.status != "waiting" or ledger.cancel_reason is not None,
                timeout=max(left, timedelta(milliseconds=1)),
                timeout_summary=f"client tool timeout for {call.tool_use.name}",
            )
        except TimeoutError:
            pass  # a result that came in the same workflow task still counts
        if call.status != "waiting":
            return
        if ledger.cancel_reason is not None:
            ledger.end_client_call(call, "cancelled", f"tool was cancelled: {ledger.cancel_reason}")
        else:
            note = (
                f"no client ran tool {call.tool_use.name!r} within {call.timeout_s:g} s: it "
                "runs on the user's machine, and no client attached to this session delivered "
                "its result"
            )
            ledger.end_client_call(call, "timed_out", note)

    async def _check(self, call: ClientCall, pending: PendingCycle, use: ToolUse) -> ToolResult:
        """Have a worker check the delivered result against the tool's declared output type."""
        handle = workflow.start_activity(
            TOOL_ACTIVITY,
            ToolRequest(
                session_id=workflow.info().workflow_id,
                tool_use=use,
                idempotency_key=call.idempotency_key,
                timeout_s=CLIENT_CHECK_TIMEOUT_S,
                client_output=ClientOutput(value=call.output, error=call.error),
            ),
            result_type=ToolResponse,
            start_to_close_timeout=tool_start_to_close(CLIENT_CHECK_TIMEOUT_S),
            heartbeat_timeout=heartbeat_timeout(self._config.heartbeat_timeout_s),
            retry_policy=TOOL_RETRY,
            summary=short(f"check client tool {use.name}"),
        )
        self._tool_calls[use.toolUseId] = handle
        self._show_details()
        try:
            response: ToolResponse = await handle
        except ActivityError as err:
            cancelled = self._ledger.cancel_reason
            if cancelled is not None:
                text = f"tool was cancelled: {cancelled}"
            else:
                text = f"the result of tool {use.name!r} could not be checked: {failure_text(err)}"
            self._ledger.end_client_call(call, "cancelled" if cancelled else "failed", text)
            return error_result(use.toolUseId, text)
        finally:
            del self._tool_calls[use.toolUseId]
            self._show_details()
        result = response.result
        assert result is not None  # a client-side tool asks no question
        status: ClientCallStatus = "done"
        if call.error is not None:
            status = "failed"
        elif result.status == "error":
            status = "invalid"
        note = None if status == "done" else "".join(c.text or "" for c in result.content)
        if note is not None and len(note) > NOTE_CHARS:  # kept with up to 50 ended calls
            note = note[:NOTE_CHARS] + " [...]"
        self._ledger.end_client_call(call, status, note)
        if response.digest is None:
            return result
        pending.digests[use.toolUseId] = response.digest
        return stripped(result)

    # ----------------------------------------------------------------------------- tool_result

    def check(self, result: ClientResult) -> None:
        """The ``tool_result`` update validator: every check of a result happens here.

        A result is refused unless it names a call this session published, with that call's
        idempotency key, while the call waits (not after it timed out, nor while its turn is
        being cancelled), and is JSON within the size limit; for a call that has its result,
        only that same result is accepted again.
        """
        expect(result, ClientResult)
        if self._answers.given(ClientResultAck) is not None:
            return  # accepted before: answered again, whatever the session's state now
        call = self._ledger.client_calls.get(result.call_id)
        if call is None:
            raise UnknownClientCall(
                f"unknown client call id {result.call_id!r}: no call of a client-side tool "
                "with this id was published by this session"
            )
        if result.idempotency_key != call.idempotency_key:
            raise InputRejected(
                f"idempotency key {result.idempotency_key!r} is not that of client call "
                f"{call.id!r} ({call.idempotency_key!r})"
            )
        digest = result_digest(result.output, result.error)
        if result.client is not None:
            within("client name", text_bytes(result.client), NAME_BYTES)
        if result.error is not None:
            within("a client's error", text_bytes(result.error), CLIENT_ERROR_BYTES)
        if call.status != "waiting":
            if digest == call.result_digest:
                return  # delivered again: answered again, applied once
            raise InputRejected(
                f"client call {call.id!r} of tool {call.tool_use.name!r} is {call.status}: it "
                "takes no other result"
            )
        if self._ledger.cancel_reason is not None:
            raise InputRejected(f"turn {call.turn} is being cancelled: its tools do not run")
        if workflow.now() >= datetime.fromisoformat(call.expires_at):
            raise InputRejected(
                f"client call {call.id!r} of tool {call.tool_use.name!r} timed out after "
                f"{call.timeout_s:g} s"
            )

    def take(self, result: ClientResult) -> ClientResultAck:
        """The ``tool_result`` update: take the result of a waiting call; a worker checks it.

        The validator (``check``) accepted it. The same update again, or the same result for
        the same call again, gets the answer and acts no second time. Nothing here depends on
        the session's id, so a history replays under any workflow id.
        """
        again = self._answers.given(ClientResultAck)
        if again is not None:
            return again
        call = self._ledger.client_calls[result.call_id]
        repeated = call.status != "waiting"
        if not repeated:
            digest = result_digest(result.output, result.error)
            self._ledger.deliver_client_result(
                call, result.output, result.error, result.client, digest
            )
        ack = ClientResultAck(
            call_id=call.id,
            tool_use_id=call.tool_use.toolUseId,
            status=call.status,
            repeated=repeated,
        )
        return self._answers.give(ack)

    def view(self) -> ClientCallsView:
        """The calls waiting for a client (the ``client_calls`` query)."""
        return ClientCallsView(calls=self._ledger.waiting_client_calls())


def result_digest(output: Any, error: str | None) -> str:
    """SHA-256 of a client's result: what tells a repeated delivery from another result.

    Raises:
        InputRejected: the result is not JSON, or is over ``CLIENT_RESULT_BYTES``.
    """
    try:
        encoded = json.dumps(
            {"output": output, "error": error},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        ).encode()
    except (TypeError, ValueError) as err:
        raise InputRejected(f"a client's result must be JSON: {err}") from None
    if len(encoded) > CLIENT_RESULT_BYTES:
        raise InputRejected(
            f"a client's result is {len(encoded):,} bytes, over Keel's limit of "
            f"{CLIENT_RESULT_BYTES:,} bytes for one result; return less, or a reference "
            "to where the data is"
        )
    return hashlib.sha256(encoded).hexdigest()
