"""Tools for fault-injection and hostile-input tests; load with ``--tools tests.fault_tools``.

``effect`` is the model of a side effect that must happen once (a payment, an e-mail): it
dedupes on ``ctx.idempotency_key`` in a ledger file, and logs every run, so a test can see
from outside both that the tool ran again after a crash and that the effect still happened
once. A test finds the kill point by watching that log:

- ``start``: the tool began (its activity attempt runs);
- ``effect``: the side effect is done (or was found done already: ``again``);
- ``done``: the tool returns now.

Each line names the step, the session, the toolUseId, the idempotency key, the process and
``ctx.attempt``.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path

from keel import ToolContext, tool

__all__ = [
    "aeffect",
    "effect",
    "guarded_effect",
    "hang_sync",
    "lookup",
    "nan_value",
    "read_attempts",
    "read_effects",
    "read_runs",
    "refund",
    "refund_reconciled",
    "unserialisable",
]


def _log(directory: Path, step: str, ctx: ToolContext) -> None:
    line = (
        f"{step} {ctx.session_id} {ctx.tool_use_id} {ctx.idempotency_key} {os.getpid()} "
        f"{ctx.attempt}\n"
    )
    with (directory / "runs.log").open("a", encoding="utf-8") as f:
        f.write(line)


def _apply_once(directory: Path, key: str, value: str) -> bool:
    """Append ``value`` to effects.log unless ``key`` is in the ledger; True when applied."""
    with (directory / "effects.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ledger = directory / "keys.log"
        done = ledger.read_text().splitlines() if ledger.exists() else []
        if key in done:
            return False
        with (directory / "effects.log").open("a", encoding="utf-8") as f:
            f.write(value + "\n")
        with ledger.open("a", encoding="utf-8") as f:
            f.write(key + "\n")
        return True


def _effect_steps(ctx: ToolContext, directory: str, value: str, before_s: float) -> Path:
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    _log(where, "start", ctx)
    if before_s:
        time.sleep(before_s)
    applied = _apply_once(where, ctx.idempotency_key, value)
    _log(where, "effect" if applied else "again", ctx)
    return where


@tool(context=True, timeout_s=60, effect="idempotent")
def effect(
    ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0, before_s: float = 0.0
) -> str:
    """Apply a side effect once per idempotency key, however often the tool runs.

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the effect, its ledger and the run log live.
        value: the line the effect appends to effects.log.
        hold_s: seconds to stay running after the effect, before returning.
        before_s: seconds to run before the effect.
    """
    where = _effect_steps(ctx, directory, value, before_s)
    if hold_s:
        time.sleep(hold_s)
    _log(where, "done", ctx)
    return f"effect {value}"


@tool(context=True, timeout_s=60, effect="idempotent")
async def aeffect(
    ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0, before_s: float = 0.0
) -> str:
    """The async twin of ``effect``: the same steps, waiting without blocking.

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the effect, its ledger and the run log live.
        value: the line the effect appends to effects.log.
        hold_s: seconds to stay running after the effect, before returning.
        before_s: seconds to run before the effect.
    """
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    _log(where, "start", ctx)
    if before_s:
        await asyncio.sleep(before_s)
    applied = _apply_once(where, ctx.idempotency_key, value)
    _log(where, "effect" if applied else "again", ctx)
    if hold_s:
        await asyncio.sleep(hold_s)
    _log(where, "done", ctx)
    return f"effect {value}"


@tool(context=True, requires_approval=True, timeout_s=60, effect="idempotent")
def guarded_effect(ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0) -> str:
    """``effect``, only once a human approved it.

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the effect, its ledger and the run log live.
        value: the line the effect appends to effects.log.
        hold_s: seconds to stay running after the effect, before returning.
    """
    return effect(ctx, directory, value, hold_s)


def _write(ctx: ToolContext, directory: str, value: str, hold_s: float, before_s: float) -> str:
    """Append ``value`` to effects.log on every run, as a tool without a guard does."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    _log(where, "start", ctx)
    if before_s:
        time.sleep(before_s)
    with (where / "effects.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with (where / "effects.log").open("a", encoding="utf-8") as f:
            f.write(value + "\n")
        with (where / "keys.log").open("a", encoding="utf-8") as f:
            f.write(ctx.idempotency_key + "\n")
    _log(where, "effect", ctx)
    if hold_s:
        time.sleep(hold_s)
    _log(where, "done", ctx)
    return f"refunded {value}"


@tool(context=True, timeout_s=60, effect="write")
def refund(
    ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0, before_s: float = 0.0
) -> str:
    """Refund: append a line to the ledger on every run, with no guard (a ``write`` tool).

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the ledger (effects.log) and the run log live.
        value: the line the refund appends.
        hold_s: seconds to stay running after the effect, before returning.
        before_s: seconds to run before the effect.
    """
    return _write(ctx, directory, value, hold_s, before_s)


def _refunded(
    ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0, before_s: float = 0.0
) -> str | None:
    """Whether the refund of this call is in the ledger: its result if so, else None."""
    keys = Path(directory) / "keys.log"
    done = keys.read_text().splitlines() if keys.exists() else []
    return f"refunded {value} (found in the ledger)" if ctx.idempotency_key in done else None


@tool(context=True, timeout_s=60, effect="write", reconcile=_refunded)
def refund_reconciled(
    ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0, before_s: float = 0.0
) -> str:
    """``refund``, with a reconcile that looks in the ledger after a crash.

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the ledger (effects.log) and the run log live.
        value: the line the refund appends.
        hold_s: seconds to stay running after the effect, before returning.
        before_s: seconds to run before the effect.
    """
    return _write(ctx, directory, value, hold_s, before_s)


@tool(context=True, timeout_s=60, effect="read")
def lookup(ctx: ToolContext, directory: str, value: str, hold_s: float = 0.0) -> str:
    """Read: log each run, change nothing.

    Args:
        ctx: the tool context, passed by the runtime.
        directory: where the run log lives.
        value: what is looked up.
        hold_s: seconds to stay running before returning.
    """
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    _log(where, "start", ctx)
    if hold_s:
        time.sleep(hold_s)
    _log(where, "done", ctx)
    return f"found {value}"


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


@tool
def unserialisable() -> object:
    """Return an object that no JSON encoder can write."""
    return _Opaque()


@tool
def nan_value() -> float:
    """Return NaN, which strict JSON cannot carry."""
    return float("nan")


@tool(timeout_s=1)
def hang_sync(seconds: float = 5.0) -> str:
    """Block a thread far longer than this tool's one-second timeout.

    Args:
        seconds: how long to block.
    """
    time.sleep(seconds)
    return "woke up"


def read_runs(directory: str | Path) -> list[tuple[str, str, str]]:
    """The run log as ``(step, session id, toolUseId)``, in order."""
    path = Path(directory) / "runs.log"
    if not path.exists():
        return []
    return [
        (parts[0], parts[1], parts[2])
        for parts in (line.split() for line in path.read_text().splitlines())
        if len(parts) >= 3
    ]


def read_effects(directory: str | Path) -> list[str]:
    """The effects applied, in order."""
    path = Path(directory) / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def read_attempts(directory: str | Path) -> list[tuple[str, int]]:
    """The run log as ``(step, ctx.attempt)``, in order."""
    path = Path(directory) / "runs.log"
    if not path.exists():
        return []
    return [
        (parts[0], int(parts[5]))
        for parts in (line.split() for line in path.read_text().splitlines())
        if len(parts) >= 6
    ]
