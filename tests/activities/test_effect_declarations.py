"""``@tool(effect=..., reconcile=...)``: a tool that declares nothing is ``write``, and a
declaration that cannot work is refused when the module loads, leaving nothing registered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from keel import tool
from keel.activities import tools as registry
from keel.activities.tools import get_tool


@pytest.fixture(autouse=True)
def scratch_registry() -> Iterator[None]:
    """Tools registered inside a test disappear after it."""
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def _refund(order: str) -> str:
    return f"refunded {order}"


def _found(order: str) -> str | None:
    return None


def test_a_tool_that_declares_nothing_is_write() -> None:
    tool(name="fx_plain")(_refund)
    entry = get_tool("fx_plain")
    assert entry is not None and entry.spec.effect == "write" and entry.reconcile is None


@pytest.mark.parametrize("effect", ["read", "idempotent", "write"])
def test_each_class_is_kept(effect: Any) -> None:
    tool(name=f"fx_{effect}", effect=effect)(_refund)
    entry = get_tool(f"fx_{effect}")
    assert entry is not None and entry.spec.effect == effect


def test_a_write_tool_keeps_its_reconcile() -> None:
    tool(name="fx_reconciled", effect="write", reconcile=_found)(_refund)
    entry = get_tool("fx_reconciled")
    assert entry is not None and entry.reconcile is _found


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ({"effect": "destructive"}, "effect is one of read, idempotent, write, not 'destructive'"),
        ({"reconcile": "ledger"}, "reconcile must be a function, not str"),
        ({"effect": "read", "reconcile": _found}, "reconcile is for a 'write' tool"),
        ({"effect": "idempotent", "reconcile": _found}, "reconcile is for a 'write' tool"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused(declared: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match="tool 'fx_bad'") as err:
        tool(name="fx_bad", **declared)(_refund)
    assert said in str(err.value)
    assert get_tool("fx_bad") is None  # not half registered
