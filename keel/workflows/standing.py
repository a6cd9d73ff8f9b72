"""Standing approvals: "approve, and stop asking" for a tool, narrowed by tests on its input.

A decision with ``always`` approves its own call and stands for the tool's later calls in the
session whose input passes every test of ``always_when``. A test reads like ``path
startswith "docs/"``: a field of the input (a dotted path reaches into objects), an operator
(``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``startswith``, ``endswith``, ``in``,
``under``) and a JSON value; several are joined with ``and``. A tool declared
``@tool(requires_approval="always")`` can never be stood down: a person decides each of its
calls.

Strings are read as paths may be used: a test never passes on a string of the input that has
a ``..`` segment (between slashes or backslashes, or the ends) or a character in ``UNSAFE`` (C0 and
C1 controls, DEL, Unicode line and paragraph separators, bidirectional and zero-width
formatting), unless the test says so: a value of the test itself has a ``..`` segment, and
holds each such character. ``under`` compares POSIX paths segment by segment, after dropping
empty and ``.`` segments: ``path under "docs"`` covers ``docs`` and ``docs/a/b``, never
``docs-other``, ``/docs/a`` (absolute against relative), a path with a ``..`` segment (a
symbolic link makes ``a/link/..`` another place than ``a``), a backslash (not a separator in
POSIX paths, one on Windows) or an ``UNSAFE`` character.

``matches`` is the approving reading (standing approvals, ``approve_when``): in doubt, a test
fails. ``may_match`` is the denying one (``deny_when``, ``escalate_when``): in doubt, it holds.

Pure module: imported by workflow code (the tests run in the workflow, on the model's input).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, get_args

from temporalio import workflow

from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import Condition, ConditionOp, Decision, ToolSpec
from keel.workflows.standing_bounds import check_bounds, signed_bounds

OPS: tuple[str, ...] = get_args(ConditionOp)
_TEST = re.compile(
    r"\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s+"
    r"(?P<op>==|!=|<=|>=|<|>|startswith|endswith|in|under)\s+"
)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
"""Characters a string of a tool input may not hide behind a test (unless the test has them)."""
_SEGMENTS = re.compile(r"[/\\]")
# The patch under which the strict reading of strings (and ``under``) decides the gate; a
# session recorded before it decided on plain string tests.
PATH_PATCH = "keel-path-tests"
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
        if head.group("op") == "under" and _path(value) is None:
            raise ValueError(
                f"the value after {head.group('field')} under must be a path without a .. "
                f"segment, a backslash or a control character: {value!r}"
            )
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


def matches(conditions: Sequence[Condition], tool_input: Any, *, strict: bool = True) -> bool:
    """Whether a tool input passes every test (a missing field or a type mismatch fails).

    A string with a ``..`` segment or an ``UNSAFE`` character passes no test that does not
    say so (see the module). ``strict=False`` reads strings as plain strings: how sessions
    recorded before ``PATH_PATCH`` were decided.
    """
    return all(_passes(c, tool_input, strict, doubt=False) for c in conditions)


def covers(conditions: Sequence[Condition], tool_input: Any) -> bool:
    """``matches``, in a workflow: the strict reading, unless recorded before ``PATH_PATCH``.

    Where the strict and the plain reading differ, the plain one decides in histories
    recorded before the patch; only then is the patch asked, so a history gets its marker
    only where it matters.
    """
    strict = matches(conditions, tool_input)
    if strict == matches(conditions, tool_input, strict=False):
        return strict
    return strict if workflow.patched(PATH_PATCH) else not strict


def may_match(conditions: Sequence[Condition], tool_input: Any) -> bool:
    """Whether a tool input passes every test, or might: for ``deny_when``, ``escalate_when``.

    A test on a string with a ``..`` segment or an ``UNSAFE`` character that does not say so
    counts as passed (``/etc/../x`` may well be under ``/etc``); otherwise as ``matches``.
    """
    return all(_passes(c, tool_input, True, doubt=True) for c in conditions)


def _passes(condition: Condition, tool_input: Any, strict: bool, doubt: bool) -> bool:
    value: Any = tool_input
    for part in condition.field.split("."):
        value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
    if value is _MISSING:
        return False
    expected, op = condition.value, condition.op
    if strict and isinstance(value, str) and _doubtful(value, expected):
        return doubt
    try:
        if op == "under":
            return isinstance(value, str) and isinstance(expected, str) and _under(value, expected)
        if op == "==":
            return bool(value == expected)
        if op == "!=":
            return bool(value != expected)
        if op == "startswith":
            return (
                isinstance(value, str) and isinstance(expected, str) and value.startswith(expected)
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


def _dotdot(text: str) -> bool:
    """Whether a string has a ``..`` segment (slashes and backslashes both separate)."""
    return ".." in _SEGMENTS.split(text)


def _doubtful(value: str, expected: Any) -> bool:
    """Whether ``value`` has a ``..`` segment or an unsafe character the test does not name."""
    dotdot, unsafe = _dotdot(value), set(UNSAFE.findall(value))
    if not dotdot and not unsafe:
        return False
    said = [expected] if isinstance(expected, str) else expected
    named = [s for s in said if isinstance(s, str)] if isinstance(said, list) else []
    if dotdot and not any(_dotdot(s) for s in named):
        return True
    return any(not any(c in s for s in named) for c in unsafe)


def _path(text: Any) -> tuple[bool, list[str]] | None:
    """A POSIX path as (absolute, segments without empty and ``.`` ones); None if refused."""
    if not isinstance(text, str) or "\\" in text or UNSAFE.search(text):
        return None
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if ".." in segments:
        return None
    return text.startswith("/"), segments


def _under(value: str, expected: str) -> bool:
    """Whether the path ``value`` is the path ``expected`` or inside it (see the module)."""
    path, root = _path(value), _path(expected)
    if path is None or root is None or path[0] != root[0]:
        return False
    return path[1][: len(root[1])] == root[1]


def signed_value(decision: Decision) -> Any:
    """What a signature of this decision covers besides ids, reason and approver.

    A plain decision signs ``approve`` / ``deny``; a standing one also its ``always``, its
    tests and its bounds (``max_uses``, ``for_s``, ``total``: each only when set, so one
    without bounds signs as before them), so a signature for one call cannot be turned into
    a standing approval, nor bounds added, changed or dropped; a ``resolve`` its result, so a
    signature for one result cannot record another; a budget's grant its ``extend``. Bounds
    on a decision without ``always`` are refused (``check_standing``), never signed away.
    """
    if decision.decision == "resolve":  # the result recorded is what was signed
        return {"decision": "resolve", "result": decision.result}
    if decision.extend is not None:  # a budget's grant: the amount is what was signed
        return {"decision": decision.decision, "extend": decision.extend}
    if not decision.always:
        return decision.decision
    return {
        "decision": decision.decision,
        "always": True,
        "when": [c.model_dump(mode="json") for c in decision.always_when],
        **signed_bounds(decision),
    }


def check_standing(decision: Decision, spec: ToolSpec | None) -> None:
    """Refuse an ``always`` decision that cannot stand.

    Raises:
        InputRejected: it denies, the tool asks a person for every call, or its bounds
            (``keel.workflows.standing_bounds.check_bounds``) are refused.
    """
    check_bounds(decision)
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
