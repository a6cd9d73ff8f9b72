"""What a client sends the session, decoded by the session itself: bad input fails clearly.

Temporal's SDK decodes a workflow's start input and its handlers' arguments before workflow
code runs. A start input that does not validate then fails the workflow task, which Temporal
retries forever (a traceback in the worker's log each time); an update's is rejected as
``RuntimeError: Failed decoding arguments``; a signal's is dropped with a traceback on every
replay. So the session's run method and its handlers take the raw payload
(``RawInput[T]``: ``temporalio.common.RawValue`` to the SDK, ``T`` to type checkers, so
clients still send ``SessionInput``, ``Decision``, ...) and decode it with ``decode``: an
input that does not validate is refused with ``InputRejected`` naming each field that is
wrong (the start fails the session, an update is rejected, a signal is dropped with a
warning).

A payload the worker cannot open at all (encrypted with a key it lacks) is not the sender's
mistake as ``decode`` sees it: that error passes through, so a start's task fails and a
worker given the key recovers it, and an update is rejected with it; a signal is dropped.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue

from keel.workflows.limits import InputRejected

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# How many wrong fields one error names (pydantic lists every one), and how much of each it
# says: a sender picks the field names (an unknown one is named) and some of the reasons.
NAMED_ERRORS = 5
NAMED_CHARS = 300

if TYPE_CHECKING:
    RawInput = Annotated[T, "a raw payload the session decodes itself"]
else:

    class RawInput:
        """``RawInput[T]`` is ``T`` to type checkers and ``RawValue`` to Temporal's SDK.

        The SDK reads a handler's parameter annotations to decode its arguments; given
        ``RawValue`` it hands the payload over undecoded.
        """

        def __class_getitem__(cls, item: object) -> type[RawValue]:
            """``RawValue``, whatever ``item`` is."""
            return RawValue


def decode(value: Any, kind: type[M], what: str, *, missing: M | None = None) -> M:
    """The input ``kind`` that a raw payload holds.

    Args:
        value: the handler's argument: a ``RawValue``, or already a ``kind`` (a workflow
            started in-process, or a test), or None when the sender gave no input at all.
        kind: the pydantic model the input must be.
        what: what the input is, for the error (``start input``, ``update decide``, ...).
        missing: what no input at all stands for, if it may be left out.

    Raises:
        InputRejected: the input is missing, is not a JSON object, or does not validate;
            the message names each wrong field (up to ``NAMED_ERRORS``).
    """
    if isinstance(value, kind):
        return value
    if value is None:
        if missing is not None:
            return missing
        raise InputRejected(f"{what}: no input was given; expected a {kind.__name__} object")
    if not isinstance(value, RawValue):
        raise InputRejected(f"{what}: expected a {kind.__name__} object, got {_kind_of(value)}")
    try:
        decoded = workflow.payload_converter().from_payload(value.payload, kind)
    except ValidationError as err:
        raise InputRejected(f"{what}: {named_errors(err)}") from None
    except (KeyError, RuntimeError, ValueError) as err:
        # an encoding the converter does not know, or a payload its encoding cannot read
        why = _clipped(str(err))
        raise InputRejected(f"{what}: could not be read as {kind.__name__}: {why}") from None
    if not isinstance(decoded, kind):  # binary/plain, binary/null: not a JSON object
        raise InputRejected(f"{what}: expected a {kind.__name__} object, got {_kind_of(decoded)}")
    return decoded


def decode_signal(value: Any, kind: type[M], signal: str, *, missing: M | None = None) -> M | None:
    """A signal's input, or None when it is malformed: the signal is dropped, with a warning.

    A signal has no answer to carry an error back, and a signal handler that raises fails
    its workflow task, retried forever: the worker's log says what was wrong, once (the
    workflow logger is silent on replay). A payload no key of this worker opens is dropped
    too: anyone can send one (issue 29), and it must not wedge the session.
    """
    what = f"signal {signal}"
    try:
        return decode(value, kind, what, missing=missing)
    except InputRejected as err:
        workflow.logger.warning("dropped a malformed signal: %s", err)
    except Exception as err:  # noqa: BLE001 - whatever it is, it must not fail the task
        workflow.logger.warning(
            "dropped a malformed signal: %s: could not be read: %s: %s",
            what,
            type(err).__name__,
            _clipped(str(err)),
        )
    return None


def named_errors(err: ValidationError) -> str:
    """Each wrong field of a validation error, as ``field.path: what is wrong (got TYPE)``."""
    errors = err.errors(include_url=False)
    named = []
    for error in errors[:NAMED_ERRORS]:
        field = ".".join(str(part) for part in error["loc"]) or "the input"
        got = "" if error["type"] == "missing" else f" (got {_kind_of(error['input'])})"
        named.append(f"{_clipped(field)}: {_clipped(error['msg'])}{got}")
    more = len(errors) - NAMED_ERRORS
    if more > 0:
        named.append(f"and {more} more")
    return "; ".join(named)


def _clipped(text: str) -> str:
    return text if len(text) <= NAMED_CHARS else text[: NAMED_CHARS - 1] + "…"


def _kind_of(value: object) -> str:
    """A JSON-ish name for a value's type; never the value (it may be large or private)."""
    if value is None:
        return "null"
    names = {bool: "boolean", int: "number", float: "number", str: "string", bytes: "bytes"}
    names.update({list: "array", dict: "object"})
    return names.get(type(value), type(value).__name__)
