"""The model activity ``keel.model.converse``: one model call, any provider."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from keel.activities.context_window import (
    CHARS_PER_TOKEN,
    context_window,
    estimate_tokens,
    fit_tokens,
)
from keel.activities.heartbeats import LoopHeartbeats
from keel.activities.models import (
    ContextTooLong,
    ModelError,
    ModelTransientError,
    abort_call,
    converse_tool_config,
    is_async_provider,
    resolve_model,
)
from keel.activities.prices import PriceTable
from keel.activities.store import ConversationStore, StoreError
from keel.activities.structured import OutputSchemaError, check_output_schema, violations
from keel.activities.text_streams import StreamAdvert, TextStream, TextStreams
from keel.activities.tools import ToolModuleError, specs_for_modules
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.activity_options import (
    MODEL_ACTIVITY,
    MODEL_ERROR_NON_RETRYABLE,
    STORE_ERROR,
    TOOL_REGISTRY_ERROR,
    heartbeat_every_s,
    next_retry_delay,
)
from keel.workflows.boundary import merge_roles
from keel.workflows.contracts import PrefixRef, ToolSpec
from keel.workflows.cost import call_cost
from keel.workflows.messages import tool_uses

if TYPE_CHECKING:
    from keel.activities.mcp.servers import McpServers

T = TypeVar("T")

# A running call beats three times per heartbeat timeout (every 10 s at Keel's 30 s default,
# 0.67 s at 2 s: ``keel.workflows.activity_options.heartbeat_every_s``), and at most this
# long apart. It was
# 1 s (fresh heartbeat snapshots for readers that cannot reach the stream endpoint), which
# kept a session that chose a longer timeout to save Actions at 9 heartbeats per 10 s call.
HEARTBEAT_EVERY_S = 10.0
# Heartbeat details carry the tail of the text streamed so far, for watchers (`keel watch`)
# that cannot reach the worker's stream endpoint, and the endpoint's address and token: they
# live in the activity's pending state on the server, never in workflow history.
STREAM_TAIL_CHARS = 4000
# Once a call has streamed text for this long, it heartbeats at once (not at the next regular
# beat) so that readers learn the stream's address; a call that ends sooner sends nothing.
ADVERTISE_AFTER_S = 0.1
# Once a stream has started, this long without any output means it is stuck: the attempt
# fails (retryably) instead of waiting for the start-to-close timeout.
STREAM_STALL_S = 90.0
# Built once: a TypeAdapter compiles its validator, which costs more than the validation.
TOOL_SPECS = TypeAdapter(list[ToolSpec])
# The error type of a model failure that may pass (ModelTransientError): retried.
MODEL_ERROR_TRANSIENT = "KeelModelTransientError"


class _Progress:
    """What a provider's stream has delivered so far; written from its thread or the loop.

    It keeps the whole text. The first text delta calls ``on_stream`` (to heartbeat soon); the
    first heartbeat after text arrived opens a stream on the worker's ``TextStreams`` with the
    text so far, and its details advertise it. A call that ends before that opens nothing.
    """

    def __init__(
        self,
        streams: TextStreams | None = None,
        on_stream: Callable[[], None] | None = None,
        where: dict[str, int] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.text_chars = 0
        self.events = 0
        self.last_at: float | None = None
        self._tail = ""
        self._parts: list[str] = []
        self._streams = streams
        self.on_stream = on_stream
        self._where = where or {}
        self.stream: TextStream | None = None
        self._advert: StreamAdvert | None = None

    def __call__(self, delta: str) -> None:
        first = False
        with self._lock:
            self.text_chars += len(delta)
            self.events += 1
            self.last_at = time.monotonic()
            if delta:
                self._tail = (self._tail + delta)[-STREAM_TAIL_CHARS:]
                if self.stream is not None:
                    self.stream.append(delta)
                elif self._streams is not None:  # kept for the stream the next beat opens
                    first = not self._parts
                    self._parts.append(delta)
        if first and self.on_stream is not None:
            self.on_stream()

    def details(self) -> dict[str, object]:
        """Heartbeat details: how much arrived, the tail of the text, where to stream it."""
        with self._lock:
            if self.stream is None and self._streams is not None and self._parts:
                self.stream, self._advert = self._streams.open()
                self.stream.append("".join(self._parts))
                self._parts.clear()  # the stream holds the text from now on
            details: dict[str, object] = {
                "text_chars": self.text_chars,
                "events": self.events,
                "text": self._tail,
                **self._where,
            }
            if self._advert is not None:
                details["stream"] = self._advert.details()
            return details

    def close(self, status: str) -> None:
        """End the stream, if one opened (``completed`` or ``failed``)."""
        with self._lock:
            stream = self.stream
        if stream is not None:
            stream.close(status)

    def stalled_for(self) -> float:
        """Seconds since the last output, 0 before the stream started."""
        with self._lock:
            return 0.0 if self.last_at is None else time.monotonic() - self.last_at


class ModelActivities:
    """The model activity, bound to the worker's conversation store."""

    def __init__(
        self,
        store: ConversationStore,
        mcp: McpServers | None = None,
        streams: TextStreams | None = None,
        request_log: str | None = None,
        environ: Mapping[str, str] | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        """Use a store for conversation prefixes, and describe the MCP servers' tools too.

        Args:
            store: the conversation store.
            mcp: the MCP servers whose tools are described to the model.
            streams: the worker's stream endpoint, which serves streamed text to watchers;
                None: watchers get only the tail of the text, from heartbeat details.
            request_log: a file to append every request a model is sent to, one JSON line
                each (``KEEL_SCRIPTED_LOG``), so a test can see what the model saw.
            environ: the worker's environment, read once by its settings: what providers
                take their variables from (``OPENAI_BASE_URL``, say).
            prices: the worker's price table (``KEEL_PRICES``): what a call costs when its
                session gives no price of its own.
        """
        self.store = store
        self.mcp = mcp
        self.streams = streams
        self.request_log = request_log
        self.environ = dict(environ or {})
        self.prices = prices or PriceTable()
        # Tool specs by digest, validated once: a session sends the same digest every call.
        self._specs = functools.lru_cache(maxsize=256)(self._load_specs)

    def _log(self, view: ModelRequest) -> None:
        """Append the request a model is sent to ``request_log``, when there is one."""
        if self.request_log is None:
            return
        record: dict[str, Any] = {
            "session": view.session_id,
            "messages": [m.model_dump(mode="json") for m in view.messages],
            "tools": converse_tool_config(view.tools),
        }
        if view.system is not None:
            record["system"] = view.system
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with _LOG_LOCK, open(self.request_log, "a", encoding="utf-8") as log:
            log.write(line)

    def _load_specs(self, digest: str) -> list[ToolSpec]:
        return TOOL_SPECS.validate_python(self.store.get_document(digest))

    def _put_specs(self, tools: list[ToolSpec]) -> str:
        """Store tool specs; their digest, which ``_load_specs`` reads back."""
        return self.store.put_document(TOOL_SPECS.dump_python(tools, mode="json"))

    def _resolve(
        self, request: ModelRequest
    ) -> tuple[ModelRequest, PrefixRef | None, str | None, list[ToolSpec] | None]:
        """Store what the request brings inline; the request as the model sees it.

        Returns:
            The request with the whole (windowed) conversation and the tool specs inline,
            the new stored prefix, the digest of the tool specs, and the specs themselves
            when the request asked for them to be described.

        Raises:
            StoreError: a stored object is missing or corrupted.
            ToolModuleError: a module to describe has no tools on this worker.
        """
        tail = [self.store.with_results(m, request.result_refs) for m in request.messages]
        history = [*self.store.load(request.prefix), *tail]
        stored = self.store.extend(request.prefix, tail)
        described: list[ToolSpec] | None = None
        if request.describe_modules is not None:
            extra = self.mcp.specs() if self.mcp is not None else ()
            tools = described = [
                *specs_for_modules(request.describe_modules, extra),
                *(request.extra_tools or []),
            ]
            for spec in request.extra_tools or []:
                if spec.name == request.output_tool:  # rejected before the model sees it
                    check_output_schema(spec.inputSchema)
            digest = self._put_specs(tools)
        elif request.tools_digest is not None:
            tools = self._specs(request.tools_digest)
            digest = request.tools_digest
        else:  # a request without either: a session that offers no tools
            tools, digest = [], None
        view = request.model_copy(
            update={
                "prefix": None,
                "messages": merge_roles(context_window(history, request.context_messages)),
                "tools": tools,
                "tools_digest": None,
                "describe_modules": None,
            }
        )
        return view, stored, digest, described

    @activity.defn(name=MODEL_ACTIVITY)
    async def converse(self, request: ModelRequest) -> ModelResponse:
        """Call the session's model with the conversation and tool specs.

        The stored prefix is loaded and the new messages are stored first; then the provider
        answers (a blocking one in a thread, an async one on the loop) while the activity
        heartbeats with how much output has arrived, and fails the attempt when a started
        stream stalls.

        Args:
            request: the stored prefix, the new messages, tools and model spec.

        Returns:
            The assistant message, stop reason, token usage, its cost (at the request's
            price, else the worker's; None when unknown) and the new stored prefix.

        Raises:
            ApplicationError: non-retryable for failures retrying cannot fix (``ModelError``,
                a missing or corrupted stored message, a tool module with no tools on this
                worker); retryable for a stalled stream.
                Other provider exceptions propagate and are retried by Temporal.
        """
        where = {"turn": request.turn, "cycle": request.cycle, "attempt": activity.info().attempt}
        progress = _Progress(self.streams, where=where)
        status = "failed"
        try:
            response, extra = await self._answer(request, progress)
            status = "completed"
        except StoreError as err:
            raise ApplicationError(str(err), type=STORE_ERROR, non_retryable=True) from err
        except ToolModuleError as err:
            raise ApplicationError(str(err), type=TOOL_REGISTRY_ERROR, non_retryable=True) from err
        except (ModelError, OutputSchemaError) as err:
            activity.logger.warning("model call failed, not retried: %s", err)
            raise ApplicationError(
                str(err),
                type=MODEL_ERROR_NON_RETRYABLE,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,  # logged above, without a traceback
            ) from err
        except ModelTransientError as err:
            raise _transient_failure(err) from err
        finally:
            progress.close(status)  # readers get the end of the stream: no more text
        if response.message.role != "assistant":
            raise ApplicationError(
                f"model {request.model!r} answered with role {response.message.role!r}",
                type=MODEL_ERROR_NON_RETRYABLE,
                non_retryable=True,
            )
        activity.logger.info(
            "model %s answered turn %s cycle %s: %s",
            request.model,
            request.turn,
            request.cycle,
            response.stopReason,
        )
        price = request.price if request.price is not None else self.prices.price(request.model)
        extra["cost_usd"] = call_cost(price, response.usage)
        return response.model_copy(update=extra)

    async def _answer(
        self, request: ModelRequest, progress: _Progress
    ) -> tuple[ModelResponse, dict[str, object]]:
        """The provider's answer, and what the activity adds to it.

        One function on purpose (past 80 lines): its closures share the provider, the progress and
        the stall flag of one call.

        The store's reads and writes run in a thread (``asyncio.to_thread``); a blocking
        provider runs in that same thread after them, an async one on the loop. Either way the
        call heartbeats on the loop's timer, and a started stream that goes quiet for
        ``STREAM_STALL_S`` is cancelled (``stalled`` tells that apart from the activity's own
        cancellation).
        """
        spec = request.model
        # cheap: no provider module imports anything heavy (Bedrock's boto3 comes with its
        # first call, in that call's thread)
        provider = resolve_model(spec, self.environ)

        def prepare() -> tuple[ModelRequest, dict[str, object]]:
            view, stored, tools_digest, described = self._resolve(request)
            terms = None if described is None else [t.terms() for t in described]
            return view, {"stored": stored, "tools_digest": tools_digest, "tools": terms}

        # A blocking provider's call runs in the thread that did the store's work for it (one
        # thread per call, not two hops); an async one's on the loop. The store's work takes a
        # thread even when it is local: doing it on the loop moved no benchmark figure by 5%
        # consistently (figures and command in docs/performance.md, "Tricks on temporalio's
        # internals").
        pool = None if is_async_provider(provider) else ThreadPoolExecutor(1, "keel-model")

        async def offload(call: Callable[..., T], *args: object) -> T:
            if pool is None:
                return await asyncio.to_thread(call, *args)
            # with this task's context, as asyncio.to_thread does: the activity's, which the
            # provider's deltas need to heartbeat from its thread
            run = functools.partial(contextvars.copy_context().run, call, *args)
            return await asyncio.get_running_loop().run_in_executor(pool, run)

        async def ask(view: ModelRequest) -> ModelResponse:
            self._log(view)
            if is_async_provider(provider):
                return await provider.converse(view, progress)
            return await offload(provider.converse, view, progress)

        async def answer() -> tuple[ModelResponse, dict[str, object]]:
            view, extra = await offload(prepare)
            view = fitted(view, context_tokens(provider))
            try:
                response = await ask(view)
            except ContextTooLong as err:  # once: trim what the model sees and ask again
                view = trimmed(view, err)
                response = await ask(view)
            extra["output_errors"] = _output_errors(request.output_tool, view, response)
            return response, extra

        work = asyncio.ensure_future(answer())  # starts at the next await: after on_stream is set
        stalled = False

        def beat() -> bool:
            """Heartbeat with the progress; cancel a started stream gone quiet instead."""
            nonlocal stalled
            if progress.stalled_for() > STREAM_STALL_S:
                stalled = True
                work.cancel()
                return False
            activity.heartbeat(progress.details())
            return True

        every_s = heartbeat_every_s(activity.info().heartbeat_timeout, HEARTBEAT_EVERY_S)
        heartbeats = LoopHeartbeats(every_s, beat)
        progress.on_stream = functools.partial(heartbeats.soon_threadsafe, ADVERTISE_AFTER_S)
        try:
            return await work
        except asyncio.CancelledError:
            # A blocking provider's thread cannot be cancelled: close its connection, so that
            # its request ends now (and the server stops generating), not at its timeout.
            abort_call(provider)
            if stalled:
                raise ApplicationError(
                    f"model stream stalled: no output for {STREAM_STALL_S:g} s",
                    type="KeelModelStreamStalled",
                ) from None
            raise
        finally:
            heartbeats.stop()
            work.cancel()  # a thread cannot be stopped: this only drops its result
            if pool is not None:
                pool.shutdown(wait=False)


_LOG_LOCK = threading.Lock()
# "maximum context length is 4096", "context window of 4096", "context size (4096)", "n_ctx 4096"
_WINDOW_IN_ERROR = re.compile(
    r"(?:context(?: length| window| size)?|n_ctx)\D{0,24}?(\d{3,8})", re.IGNORECASE
)


def context_tokens(provider: object) -> int | None:
    """The context window a provider's model spec names (``context_tokens=N``), if any."""
    value = getattr(provider, "context_tokens", None)
    return value if isinstance(value, int) else None


def fitted(view: ModelRequest, window: int | None) -> ModelRequest:
    """The view trimmed to a known context window, leaving room for the answer."""
    if window is None:
        return view
    reserve = (view.inference.maxTokens if view.inference else None) or window // 4
    budget = max(window - reserve - estimate_tokens_of_tools(view), window // 8)
    messages = fit_tokens(view.messages, budget)
    if len(messages) == len(view.messages):
        return view
    activity.logger.info(
        "conversation trimmed to fit %s tokens: %s of %s messages shown",
        window,
        len(messages),
        len(view.messages),
    )
    return view.model_copy(update={"messages": merge_roles(messages)})


def trimmed(view: ModelRequest, err: ContextTooLong) -> ModelRequest:
    """The view for the one retry after the server said the context is too long.

    Three quarters of the window the server names ("maximum context length is 4096", "context
    window of 4096"), or half of what was sent when it names none; token-aware
    (``fit_tokens``). A view that cannot shrink any more is the server's error again.

    Raises:
        ContextTooLong: nothing left to trim.
    """
    named = _WINDOW_IN_ERROR.search(str(err))
    if named is not None:
        budget = int(named.group(1)) * 3 // 4 - estimate_tokens_of_tools(view)
    else:
        budget = estimate_tokens(view.messages) // 2
    messages = fit_tokens(view.messages, budget)
    if len(messages) >= len(view.messages):
        raise err
    activity.logger.warning(
        "model %s: %s; asking again with the latest %s of %s messages (about %s tokens)",
        view.model,
        err,
        len(messages),
        len(view.messages),
        estimate_tokens(messages),
    )
    return view.model_copy(update={"messages": merge_roles(messages)})


def estimate_tokens_of_tools(view: ModelRequest) -> int:
    """About how many tokens the tool specs take in a request."""
    chars = sum(len(json.dumps(t.inputSchema)) + len(t.description) for t in view.tools or [])
    return chars // CHARS_PER_TOKEN


def _transient_failure(err: ModelTransientError) -> ApplicationError:
    """One log line for a failure that may pass, and the failure Temporal retries (or ends).

    The SDK logs every failed attempt with its traceback; a BENIGN failure only at debug
    level, so this line is all a retry shows. The last attempt's failure says it gave up,
    and is the turn's error: it never says "will retry". The last attempt is the one whose
    retry would come after the call's schedule-to-close timeout (``SessionConfig
    .model_retry_s``), or the policy's last attempt when it has a maximum.

    A server that said how long to wait (``Retry-After``: ``err.retry_after_s``) gets the
    next attempt no sooner (``next_retry_delay``; never sooner than the backoff either); a
    wait past what is left of ``model_retry_s`` ends the call now, saying so.
    """
    info = activity.info()
    policy = info.retry_policy
    delay = next_retry_delay(policy, info.attempt) if policy is not None else None
    asked = err.retry_after_s
    if asked is not None:
        delay = max(delay or timedelta(0), timedelta(seconds=asked))
    out_of_attempts = policy is not None and 0 < policy.maximum_attempts <= info.attempt
    bound = info.schedule_to_close_timeout
    now = datetime.now(UTC)
    first = info.scheduled_time
    if first.tzinfo is None:
        first = first.replace(tzinfo=UTC)
    out_of_time = bound is not None and delay is not None and now + delay >= first + bound
    if out_of_attempts or out_of_time:
        within = ""
        if out_of_time and bound:
            took, most = (now - first).total_seconds(), bound.total_seconds()
            within = f" in {took:.0f} s (model_retry_s: {most:g} s)"
            if asked is not None:
                within += f"; the server asked to wait {asked:g} s more (Retry-After)"
        activity.logger.warning("%s; giving up after %d attempts%s", err, info.attempt, within)
        return ApplicationError(
            f"{err}; gave up after {info.attempt} attempts{within}",
            type=MODEL_ERROR_TRANSIENT,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    said = f" in {delay.total_seconds():g} s" if delay is not None else ""
    if asked is not None:
        said += " (Retry-After)"
    of = f" of {policy.maximum_attempts}" if policy and policy.maximum_attempts else ""
    activity.logger.warning("%s; retrying%s (attempt %d%s failed)", err, said, info.attempt, of)
    return ApplicationError(
        str(err),
        type=MODEL_ERROR_TRANSIENT,
        category=ApplicationErrorCategory.BENIGN,
        next_retry_delay=delay if asked is not None else None,
    )


def _output_errors(
    tool: str | None, view: ModelRequest, response: ModelResponse
) -> dict[str, list[str]] | None:
    """The verdict on each call of the structured-output tool, by toolUseId."""
    if tool is None:
        return None
    spec = next((t for t in view.tools if t.name == tool), None)
    errors: dict[str, list[str]] = {}
    for use in tool_uses(response.message):
        if use.name == tool:
            errors[use.toolUseId] = (
                ["the session offers no output schema"]
                if spec is None
                else violations(spec.inputSchema, use.input)
            )
    return errors
