"""``KeelClient`` is its parts: each operation is defined once, with one signature.

The client inherits its methods from small classes (``SessionCaller``, ``SessionReader``,
``SessionWriter``, ``SessionDecider``, ``ClientTools``); none re-declares another's method,
and ``KeelClient`` declares none of its own, so nothing forwards a call.
"""

from __future__ import annotations

import inspect

from keel import KeelClient
from keel.worker.client.calls import SessionCaller
from keel.worker.client.reading import SessionReader

# What Python puts in every class's namespace; not an operation.
_CLASS_BOOKKEEPING = {
    "__module__",
    "__qualname__",
    "__doc__",
    "__dict__",
    "__weakref__",
    "__annotations__",
    "__firstlineno__",
    "__static_attributes__",
    "__parameters__",
    "__orig_bases__",
}


def redeclared(cls: type) -> dict[str, list[str]]:
    """Names defined by more than one class of ``cls``'s MRO (object aside), with the classes."""
    where: dict[str, list[str]] = {}
    for part in cls.__mro__[:-1]:
        for name in vars(part):
            if name not in _CLASS_BOOKKEEPING:
                where.setdefault(name, []).append(part.__qualname__)
    return {name: parts for name, parts in where.items() if len(parts) > 1}


def test_no_part_redeclares_a_method_of_another() -> None:
    assert redeclared(KeelClient) == {}


def test_keel_client_declares_nothing_of_its_own() -> None:
    own = set(vars(KeelClient)) - _CLASS_BOOKKEEPING
    assert own == set(), own


def test_a_forwarding_method_is_caught() -> None:
    """The check can fail: a client that forwards ``state`` to its reader is flagged."""

    class Forwarding(KeelClient):
        async def state(self, session_id: str, **kwargs: object) -> object:
            return await SessionReader.state(self, session_id)

    assert redeclared(Forwarding) == {
        "state": ["test_a_forwarding_method_is_caught.<locals>.Forwarding", "SessionReader"]
    }


def test_the_public_methods_are_the_documented_ones() -> None:
    """The names users call (docs/python-api.md), every one still there, none added."""
    public = {n for n in dir(KeelClient) if not n.startswith("_")}
    assert public == {
        "budget", "cancel", "check_open", "check_worker", "client_calls", "close", "config",
        "decide", "effects", "ended", "event_count", "events", "exists", "export_case", "fork",
        "handle", "list_sessions", "model_stream", "model_text", "pending", "policy", "prompt",
        "replay", "resolve", "respond", "revoke", "run", "serve_tools", "session_task_queue",
        "snapshots", "start", "state", "status", "steer", "streamed_text", "task_failure",
        "tool_result", "turn", "wait_turn",
    }  # fmt: skip
    assert inspect.signature(KeelClient) == inspect.signature(SessionCaller)
    assert list(inspect.signature(KeelClient).parameters) == [
        "client", "task_queue", "store", "query_timeout_s", "wait_for_worker", "on_waiting",
    ]  # fmt: skip
