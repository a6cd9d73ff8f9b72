"""Function judges: the ``@judge`` mark, the worker's judges, and how one is run.

A function judge is a function marked ``@judge`` (from ``keel``) in a module the worker was
given (``keel worker --tools MODULE`` / ``KeelPlugin(tool_modules=[...])``; a module of judges
only is a valid ``--tools`` module). A session names it ``module:function``
(``SessionConfig.judge``). The worker never imports what a session names: it looks the name
up among the judges of its own modules, so ``sys:addaudithook`` or any other importable
function is refused (the call goes to a person).

A judge runs off the event loop: a plain function in a thread of its own (a daemon thread, so
a hung judge never holds up the worker's exit), an ``async def`` one on the loop under
``asyncio.wait_for``; either way its timeout is enforced (``Settings.judge_timeout_s``,
``KEEL_JUDGE_TIMEOUT_S``), and a judge that does not answer in time escalates. A thread
cannot be killed: a plain judge that hangs keeps its thread until it returns. At most
``JUDGE_THREADS`` such threads run at once; past that, a judge is not started and the call
escalates. The worker's other sessions, tools and model calls are not affected.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from keel.workflows.activity_contracts import JudgeRequest, JudgeVerdict

__all__ = ["JUDGE_THREADS", "JudgeRefused", "find_judge", "judge", "judges_of", "run_judge"]

F = TypeVar("F", bound=Callable[..., Any])
# Threads plain (not async) function judges run in: a hung judge holds one of them.
JUDGE_THREADS = 4
_MARK = "__keel_judge__"
_JUDGES: dict[str, Callable[..., Any]] = {}
_THREADS = threading.BoundedSemaphore(JUDGE_THREADS)


class JudgeRefused(ValueError):
    """A session names a judge this worker will not run (the message says why)."""


def judge(fn: F, /) -> F:
    """Mark a function as a judge in the gate, named ``module:function`` by sessions.

    It is given a ``JudgeRequest`` and answers a ``JudgeVerdict`` (or a dict of its fields);
    it may be ``async def``. Only judges in a module the worker loads (``--tools``) are run.
    """
    if not callable(fn):
        raise TypeError(f"@judge marks a function, not {fn!r}")
    setattr(fn, _MARK, True)
    _JUDGES[f"{fn.__module__}:{fn.__qualname__}"] = fn
    return fn


def judges_of(module: str) -> list[str]:
    """The names (``module:function``) of the judges a module defines."""
    return [name for name in _JUDGES if name.partition(":")[0] == module]


def find_judge(target: str, modules: Sequence[str]) -> Callable[..., Any]:
    """The judge a session names, among those of the worker's ``modules``; nothing imported.

    Raises:
        JudgeRefused: it is not in a module the worker was given, or not marked ``@judge``.
    """
    module, _, name = target.partition(":")
    if module not in modules:
        given = ", ".join(modules) or "none"
        raise JudgeRefused(
            f"judge {target!r} is not in a module this worker was given (its --tools modules: "
            f"{given}); a judge is a @judge function of one of them"
        )
    fn = _JUDGES.get(target)
    if fn is None or not getattr(fn, _MARK, False):
        raise JudgeRefused(f"{name!r} in {module!r} is not marked @judge; it is not run")
    return fn


async def run_judge(
    fn: Callable[..., Any], request: JudgeRequest, timeout_s: float
) -> JudgeVerdict:
    """Ask a function judge, within ``timeout_s``; ``escalate`` for anything but a verdict.

    A plain function runs in a daemon thread of its own (a hung one keeps its thread: threads
    cannot be killed); an ``async def`` one on the loop, cancelled at the timeout.
    """
    try:
        if inspect.iscoroutinefunction(fn):
            answer = await asyncio.wait_for(fn(request), timeout_s)
        else:
            if not _THREADS.acquire(blocking=False):
                return JudgeVerdict(
                    action="escalate",
                    reason=f"{JUDGE_THREADS} judges are still running on this worker; "
                    "none more is started",
                )
            answer = await asyncio.wait_for(_in_thread(fn, request), timeout_s)
            if inspect.isawaitable(answer):  # a plain function that returned a coroutine
                answer = await asyncio.wait_for(answer, timeout_s)
    except TimeoutError:
        return JudgeVerdict(
            action="escalate", reason=f"the judge did not answer within {timeout_s:g} s"
        )
    if isinstance(answer, JudgeVerdict):
        return answer
    if isinstance(answer, Mapping):
        try:
            return JudgeVerdict.model_validate(dict(answer))
        except ValidationError as err:
            short = str(err).splitlines()[0]
            return JudgeVerdict(
                action="escalate", reason=f"the judge's answer is no verdict: {short}"
            )
    return JudgeVerdict(action="escalate", reason=f"the judge answered {answer!r}, no verdict")


def _in_thread(fn: Callable[..., Any], request: JudgeRequest) -> asyncio.Future[Any]:
    """``fn(request)`` in a daemon thread (holding one of ``_THREADS``); its future answer."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if answer.done():
            return  # timed out (cancelled) meanwhile
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)

    def work() -> None:
        value, error = None, None
        try:
            value = fn(request)
        except BaseException as err:  # noqa: BLE001 - handed to the activity, which escalates
            error = err
        finally:
            _THREADS.release()
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop closed while the judge ran: nobody waits for it

    try:
        threading.Thread(target=work, name="keel-judge", daemon=True).start()
    except BaseException:
        _THREADS.release()
        raise
    return answer
