"""How a call to a session is made: ``SessionCaller``, and Temporal's errors as Keel's.

Queries and updates of a session are answered by a worker polling the session's task queue,
not by the Temporal server. With no worker there, Temporal keeps an update waiting for as long
as the caller waits, and lets a query time out, or fails it with ``FAILED_PRECONDITION`` once no
worker has polled the queue for a while. ``SessionCaller`` turns such a query failure into
``NoWorker``, or asks again; while a request waits, it can report a ``WorkerWait`` now and then.
``SessionCaller`` is the base of ``KeelClient``'s parts (``SessionReader``, ``SessionWriter``,
``SessionDecider``, ``ClientTools``): it holds the state they share (the client, the task
queue, the store) and sends every call. The errors are defined in
``keel.worker.client.errors``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import temporalio.api.enums.v1 as enums
import temporalio.api.taskqueue.v1 as taskqueue
import temporalio.api.workflowservice.v1 as wsv1
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from keel.activities.store import ConversationStore
from keel.activities.store.encrypted import EncryptionKeyError
from keel.worker.client.errors import (
    NoWorker,
    Pollers,
    RequestRejected,
    SessionClosed,
    SessionNeverRan,
    SessionNotFound,
    WorkerWait,
)
from keel.worker.client.never_ran import unstarted_input
from keel.workflows.limits import InputRejected, check_input
from keel.workflows.session import AgentSession

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P")

# A request that a worker has not answered after this long is reported, then again every
# NOTICE_EVERY_S seconds while it waits.
NOTICE_AFTER_S = 3.0
NOTICE_EVERY_S = 30.0
# Pause before a query that found no worker is sent again.
RETRY_PAUSE_S = 0.5
# A live worker polls its task queue again within about a minute; an older last poll means gone.
POLL_STALE_S = 70.0
# A query that timed out while a worker polls is asked this many times more before the
# reader hears that no worker answers: a worker on a loaded machine can be late, not gone.
BUSY_ASKS_AGAIN = 1
# How a query that no worker took ends: the caller's deadline or Temporal's passed first.
_TIMED_OUT = frozenset({RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED})
_DESCRIBE_TIMEOUT = timedelta(seconds=5)
# How Temporal's FAILED_PRECONDITION says that no worker polls the session's queue.
_NO_POLLER = "no poller seen"


async def pollers(client: Client, task_queue: str) -> Pollers:
    """What Temporal says of the workers polling ``task_queue`` for workflow tasks."""
    request = wsv1.DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=taskqueue.TaskQueue(
            name=task_queue, kind=enums.TaskQueueKind.TASK_QUEUE_KIND_NORMAL
        ),
        task_queue_type=enums.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        response = await client.workflow_service.describe_task_queue(
            request, timeout=_DESCRIBE_TIMEOUT
        )
    except RPCError as err:
        logger.info("cannot describe task queue %s: %s", task_queue, err)
        return Pollers(task_queue, known=False, last_poll_s=None)
    polls = [
        p.last_access_time.ToDatetime(tzinfo=UTC)
        for p in response.pollers
        if p.HasField("last_access_time")
    ]
    if not polls:
        return Pollers(task_queue, known=True, last_poll_s=None)
    last = max(0.0, (datetime.now(UTC) - max(polls)).total_seconds())
    return Pollers(task_queue, known=True, last_poll_s=last)


async def no_worker(
    client: Client, session_id: str, task_queue: str, err: RPCError
) -> NoWorker | None:
    """What a failed query means: ``NoWorker``, or None when it failed for another reason.

    A query that timed out found no worker to take it. ``FAILED_PRECONDITION`` is how Temporal
    says no worker polled recently, but also how it refuses a query while the session's
    workflow task fails; the task queue's pollers tell the two apart.
    """
    if err.status not in _TIMED_OUT and err.status != RPCStatusCode.FAILED_PRECONDITION:
        return None
    workers = await pollers(client, task_queue)
    # Temporal's "no poller seen for task queue recently" means no worker whatever the
    # last poll the queue's description shows (a worker stopped within POLL_STALE_S)
    saw_none = _NO_POLLER in err.message
    if err.status == RPCStatusCode.FAILED_PRECONDITION and _polled(workers) and not saw_none:
        return None
    return NoWorker(session_id, workers, err.message)


def _polled(workers: Pollers) -> bool:
    """Whether a worker polled the queue within ``POLL_STALE_S``: one runs, or just did."""
    return workers.last_poll_s is not None and workers.last_poll_s < POLL_STALE_S


def _late(err: RPCError, missing: NoWorker) -> bool:
    """Whether a query timed out while a worker polls the queue: late rather than gone."""
    return err.status in _TIMED_OUT and _polled(missing.workers)


def cancelling() -> bool:
    """Whether the running task is being cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


# The message temporalio puts on a failure whose real message is encoded (encrypted).
ENCODED_FAILURE = "Encoded failure"
_KEY_MISMATCH = (
    "its error is encrypted with a key this client does not have: the worker and this client "
    "have different keys (KEEL_ENCRYPTION_KEY, KEEL_DECRYPTION_KEYS)"
)


async def call_session(session_id: str, call: Awaitable[T]) -> T:
    """Await a call to a session, turning Temporal's errors into Keel's."""
    try:
        return await call
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = getattr(cause, "message", None) or str(cause or err)
        raise RequestRejected(message, kind=getattr(cause, "type", None)) from err
    except WorkflowQueryFailedError as err:
        if err.message == ENCODED_FAILURE:
            raise EncryptionKeyError(
                f"session {session_id!r}: the worker failed the request with an encrypted "
                "error this client cannot read; most likely the worker and this client have "
                "different keys (KEEL_ENCRYPTION_KEY, KEEL_DECRYPTION_KEYS)"
            ) from err
        raise
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise SessionNotFound(f"no session {session_id!r}") from err
        raise


# A query can show an interrupt (or a client-side call) before the workflow task that opens it
# has run: it replays the events the server has, the model call's result among them, while the
# task that will process that result is still waiting. A request sent at once joins that task,
# and Temporal validates it before the result, so what it names is not there yet. Rejected
# updates write nothing, so the same request is sent again, a few times, over about 3 s: after
# a worker died, that task waits a second on the dead worker's sticky queue (the plugin's
# sticky schedule-to-start timeout) before another worker takes it.
SETTLE_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)


async def settling(send: Callable[[], Awaitable[T]], kind: str) -> T:
    """``send()``; again while it is rejected (``RequestRejected``) with this ``kind``.

    ``kind`` is the error the session rejects a request with when what it names is not there
    yet (``UnknownInterrupt``, ``UnknownClientCall``); see ``SETTLE_DELAYS_S``.
    """
    for delay in SETTLE_DELAYS_S:
        try:
            return await send()
        except RequestRejected as err:
            if err.kind != kind:
                raise
        await asyncio.sleep(delay)
    return await send()


def within_limits(value: object) -> None:
    """Refuse an input over a limit before it is sent (``RequestRejected``, as the session).

    The limits are ``keel.workflows.limits``'s.
    """
    try:
        check_input(value)
    except InputRejected as err:
        raise RequestRejected(str(err), kind=InputRejected.__name__) from err


class SessionCaller:
    """Sends requests to sessions on one task queue, mapping Temporal's errors to Keel's.

    It holds what every call needs: the client, the task queue, how long a query may wait and
    what to do while it waits, and the task queue of each session it has described; and the
    workers' conversation store, for the reader. ``KeelClient`` is one (by inheritance).
    """

    def __init__(
        self,
        client: Client,
        task_queue: str,
        store: ConversationStore | None = None,
        *,
        query_timeout_s: float | None = None,
        wait_for_worker: bool = False,
        on_waiting: Callable[[WorkerWait], None] | None = None,
    ) -> None:
        """Wrap a client made by ``keel.worker.process.assembly.connect``.

        Args:
            client: the Temporal client.
            task_queue: the workers' task queue (of new sessions, and of listings).
            store: the workers' conversation store, to read messages of earlier runs (after
                continue-as-new) for ``state``; without it, ``state`` of such a session fails.
            query_timeout_s: how long a query may wait for a worker to answer (default:
                as long as Temporal lets it).
            wait_for_worker: when a query finds no worker to answer it, ask again until one
                does, instead of raising ``NoWorker``.
            on_waiting: called with a ``WorkerWait`` when a query or an update has had no
                worker's answer for 3 s, then every 30 s while it waits.
        """
        self.client = client
        self.task_queue = task_queue
        self.store = store
        self.query_timeout = (
            timedelta(seconds=query_timeout_s) if query_timeout_s is not None else None
        )
        self.wait_for_worker = wait_for_worker
        self.on_waiting = on_waiting
        self._queues: dict[str, str] = {}

    def handle(self, session_id: str) -> WorkflowHandle[AgentSession, object]:
        """The workflow handle of a session."""
        return self.client.get_workflow_handle_for(AgentSession.run, session_id)

    async def exists(self, session_id: str) -> bool:
        """Whether a session with this id exists (running or not)."""
        return await self.status(session_id) is not None

    async def status(self, session_id: str) -> WorkflowExecutionStatus | None:
        """The Temporal status of the session's workflow; None when there is no such session.

        Needs no worker, unlike a query.
        """
        try:
            description = await self.client.get_workflow_handle(session_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        self._queues[session_id] = description.task_queue
        return description.status

    async def session_task_queue(self, session_id: str) -> str:
        """The task queue a session's workflow runs on (this client's for a new session)."""
        if session_id not in self._queues:
            with suppress(RPCError):
                await self.status(session_id)
        return self._queues.get(session_id, self.task_queue)

    async def check_open(self, session_id: str) -> None:
        """Make sure the session exists and its workflow still runs.

        Raises:
            SessionNotFound: no such session.
            SessionClosed: the session has ended.
        """
        status = await self.status(session_id)
        if status is None:
            raise SessionNotFound(f"no session {session_id!r}")
        if status != WorkflowExecutionStatus.RUNNING:
            raise SessionClosed(
                f"session {session_id!r} is closed ({status.name.lower()}): it takes no more "
                "prompts, decisions or guidance; start a new session to go on"
            )

    async def check_worker(self, session_id: str) -> None:
        """Fail at once when Temporal knows of no worker on the session's task queue.

        Raises:
            NoWorker: no worker has polled the task queue for minutes.
        """
        workers = await pollers(self.client, await self.session_task_queue(session_id))
        if workers.none:
            raise NoWorker(session_id, workers)

    async def _call(self, session_id: str, call: Awaitable[T]) -> T:
        """``call_session``, telling a closed session from a missing one."""
        try:
            return await call_session(session_id, call)
        except SessionNotFound:
            await self.check_open(session_id)
            raise

    async def _ask(
        self, session_id: str, send: Callable[[], Awaitable[T]], *, query: bool = True
    ) -> T:
        """Send a query or update, which a worker must answer, and wait for the answer.

        A query that no worker answers raises ``NoWorker``, or is sent again when
        ``wait_for_worker`` is set; one that timed out while a worker polls the queue is
        sent ``BUSY_ASKS_AGAIN`` more times first (a loaded worker is late, not gone). An
        update waits as long as Temporal keeps it. Meanwhile ``on_waiting`` hears of the
        wait (see ``__init__``).

        Raises:
            NoWorker: no worker answered the query.
            SessionNotFound: no such session.
            SessionClosed: the session has ended (an update, or the query of a closed run).
            SessionNeverRan: a query of a session Temporal ended before any worker ran it.
            RequestRejected: the session refused the update.
        """
        notices = asyncio.create_task(self._notices(session_id)) if self.on_waiting else None
        late = 0
        try:
            while True:
                try:
                    return await self._call(session_id, send())
                except RPCError as err:
                    if not query or cancelling():
                        raise
                    start = await unstarted_input(self.client, session_id, err)
                    if start is not None:  # no worker can ever answer: a reader says so
                        raise SessionNeverRan(session_id, start) from err
                    queue = await self.session_task_queue(session_id)
                    missing = await no_worker(self.client, session_id, queue, err)
                    if missing is None:
                        raise
                    if _late(err, missing) and late < BUSY_ASKS_AGAIN:
                        late += 1
                        logger.info("%s; a worker polls, so asking again", missing)
                        continue
                    if not self.wait_for_worker:
                        raise missing from err
                    logger.info("%s; asking again", missing)
                await asyncio.sleep(RETRY_PAUSE_S)
        except Exception:
            # temporalio reports an update cancelled by its caller as an error of its own;
            # a caller cancelled (Ctrl-C) must see its cancellation.
            if cancelling():
                raise asyncio.CancelledError from None
            raise
        finally:
            if notices is not None:
                notices.cancel()
                with suppress(asyncio.CancelledError):
                    await notices

    async def _update(
        self, session_id: str, update: UpdateMethodMultiParam[[AgentSession, P], T], arg: P
    ) -> T:
        """Send an update to the session and wait for a worker's answer.

        An input over a limit (``keel.workflows.limits``) is refused here, as the session
        would refuse it, before it is sent.
        """
        within_limits(arg)
        return await self._ask(
            session_id,
            lambda: self.handle(session_id).execute_update(update, arg),
            query=False,
        )

    async def task_failure(self, session_id: str) -> str | None:
        """Why the session's workflow task keeps failing, if it has failed more than once.

        A worker that cannot decrypt the session's history (another ``KEEL_ENCRYPTION_KEY``)
        fails every workflow task, and Temporal retries it: the session waits rather than
        breaks, and this tells why. An error this client cannot decrypt either is reported as
        a key mismatch.
        """
        handle = self.client.get_workflow_handle(session_id)
        try:
            description = await handle.describe()
        except RPCError:
            return None
        task = description.raw_description.pending_workflow_task
        if task.attempt < 2:
            return None
        last = None
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_task_failed_event_attributes"):
                last = event.workflow_task_failed_event_attributes.failure
        if last is None:
            return None
        if last.message != ENCODED_FAILURE:
            return last.message
        try:
            error = await self.client.data_converter.decode_failure(last)
        except EncryptionKeyError:
            return _KEY_MISMATCH
        # The codec passes a payload it cannot open through (keel.worker.encryption), and
        # temporalio then keeps the placeholder message: the error is still sealed.
        if getattr(error, "message", None) == ENCODED_FAILURE:
            return _KEY_MISMATCH
        return str(error)

    async def _notices(self, session_id: str) -> None:
        """Tell ``on_waiting`` of a request still unanswered, after 3 s, then every 30 s."""
        assert self.on_waiting is not None
        loop = asyncio.get_running_loop()
        sent = loop.time()
        due = NOTICE_AFTER_S
        while True:
            await asyncio.sleep(max(0.0, sent + due - loop.time()))
            waited = loop.time() - sent  # when it looked, not after the server answered
            workers = await pollers(self.client, await self.session_task_queue(session_id))
            failing = await self.task_failure(session_id)
            self.on_waiting(WorkerWait(session_id, waited, workers, failing))
            due += NOTICE_EVERY_S
