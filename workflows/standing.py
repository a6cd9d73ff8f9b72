"""Standing approvals: "approve, and stop asking" for a tool, narrowed by tests on its input.

A decision with ``always`` approves its own call and stands for the tool's later calls in the
session whose input passes every test of ``always_when``. A test reads like ``path
startswith "docs/"``: a field of the input (a dotted path reaches into objects), an operator
(``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``startswith``, ``endswith``, ``in``) and a JSON
value; several are joined with ``and``. A tool declared ``@tool(requires_approval="always")``
can never be stood down: a person decides each of its calls.

Pure module: imported by workflow code (the tests run in the workflow, on the model's input).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, get_args

from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Condition, ConditionOp, Decision, ToolSpec

OPS: tuple[str, ...] = get_args(ConditionOp)
_TEST = re.compile(
    r"\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s+"
    r"(?P<op>==|!=|<=|>=|<|>|startswith|endswith|in)\s+"
)
_AND = re.compile(r"\s+and\s+|\s*$")
_MISSING = object()


def parse_conditions(text: str) -> list[Condition]:
    """The tests of an ``--always-when`` text, e.g. ``path startswith "docs/" and n < 10``.

    Raises:
        ValueError: naming what is not a test (values are JSON: strings in double quotes).
    """
    found: list[Condition] = []
    rest = text.strip()
    decoder = json.JSONDecoder()
    while rest:
        head = _TEST.match(rest)
        if head is None:
            raise ValueError(
                f"not a test: {rest!r}; write FIELD OP VALUE, with OP one of {', '.join(OPS)} "
                'and VALUE in JSON (strings in double quotes), joined by "and"'
            )
        start = head.end()
        try:
            value, end = decoder.raw_decode(rest, start)
        except json.JSONDecodeError:
            raise ValueError(
                f"the value after {head.group('field')} {head.group('op')} is not JSON "
                f"(strings in double quotes): {rest[start:]!r}"
            ) from None
        found.append(Condition(field=head.group("field"), op=head.group("op"), value=value))
        tail = _AND.match(rest, end)
        if tail is None:
            raise ValueError(f'expected "and" or the end after the value: {rest[end:]!r}')
        rest = rest[tail.end() :]
    if not found:
        raise ValueError("no test given")
    return found


def describe(conditions: Sequence[Condition]) -> str:
    """The tests as a person writes them (``path startswith "docs/"``); ``every call``."""
    if not conditions:
        return "every call"
    return " and ".join(f"{c.field} {c.op} {json.dumps(c.value)}" for c in conditions)


def matches(conditions: Sequence[Condition], tool_input: Any) -> bool:
    """Whether a tool input passes every test (a missing field or a type mismatch fails)."""
    return all(_passes(c, tool_input) for c in conditions)


def _passes(condition: Condition, tool_input: Any) -> bool:
    value: Any = tool_input
    for part in condition.field.split("."):
        value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
    if value is _MISSING:
        return False
    expected, op = condition.value, condition.op
    try:
        if op == "==":
            return bool(value == expected)
        if op == "!=":
            return bool(value != expected)
        if op == "startswith":
            return isinstance(value, str) and isinstance(expected, str) and value.startswith(
                expected
            )
        if op == "endswith":
            return isinstance(value, str) and isinstance(expected, str) and value.endswith(expected)
        if op == "in":
            return isinstance(expected, list) and value in expected
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False  # order tests take numbers only
        if isinstance(expected, bool) or not isinstance(expected, int | float):
            return False
        return bool(
            {"<": value < expected, "<=": value <= expected, ">": value > expected}.get(
                op, value >= expected
            )
        )
    except TypeError:
        return False


def signed_value(decision: Decision) -> Any:
    """What a signature of this decision covers besides ids, reason and approver.

    A plain decision signs ``approve`` / ``deny``; a standing one also its ``always`` and its
    tests, so a signature for one call cannot be turned into a standing approval.
    """
    if not decision.always:
        return decision.decision
    return {
        "decision": decision.decision,
        "always": True,
        "when": [c.model_dump(mode="json") for c in decision.always_when],
    }


def check_standing(decision: Decision, spec: ToolSpec | None) -> None:
    """Refuse an ``always`` decision that cannot stand.

    Raises:
        InputRejected: it denies, or the tool asks a person for every call.
    """
    if not decision.always:
        if decision.always_when:
            raise InputRejected("always_when needs always")
        return
    if decision.decision != "approve":
        raise InputRejected("only an approval can stand for later calls (always with deny)")
    if spec is not None and spec.requires_approval == "always":
        raise InputRejected(
            f"tool {spec.name!r} asks a person for every call; it cannot be approved always"
        )
