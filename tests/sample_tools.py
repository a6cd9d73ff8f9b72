"""Tools for Keel's tests; a worker loads them with ``--tools tests.sample_tools``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from keel import ToolContext, ToolUse, Verdict, tool, tool_policy

__all__ = [
    "add",
    "big",
    "big_async",
    "boom",
    "confirm_twice",
    "echo",
    "guarded_record",
    "hang",
    "payments",
    "pick_account",
    "record",
    "slow",
    "slow_sync",
    "transfer",
    "whoami",
]


@tool(effect="read")
def echo(text: str) -> str:
    """Return the given text unchanged.

    Args:
        text: the text to send back.
    """
    return text


@tool(effect="read")
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend.
        b: the second addend.
    """
    return a + b


@tool(effect="read")
async def slow(seconds: float, label: str) -> str:
    """Wait without blocking, then return a label.

    Args:
        seconds: how long to wait.
        label: what to return once done.
    """
    await asyncio.sleep(seconds)
    return label


@tool(effect="read")
def slow_sync(seconds: float, label: str) -> str:
    """Block the calling thread for a while, then return a label.

    Args:
        seconds: how long to block.
        label: what to return once done.
    """
    time.sleep(seconds)
    return label


@tool(effect="read")
def boom(message: str) -> str:
    """Always fail.

    Args:
        message: the message of the RuntimeError raised.
    """
    raise RuntimeError(message)


@tool(timeout_s=1, effect="read")
async def hang() -> str:
    """Sleep far longer than this tool's one-second timeout."""
    await asyncio.sleep(30)
    return "woke up"


@tool(context=True, effect="read")
def whoami(ctx: ToolContext) -> str:
    """Return this call's idempotency key (``<workflow id>/<toolUseId>``).

    Args:
        ctx: the tool context, passed by the runtime.
    """
    return ctx.idempotency_key


@tool(effect="write")
def record(path: str, value: str) -> str:
    """Append a line to a file, to count how often a side effect happened.

    Args:
        path: the file to append to; created if missing.
        value: the line to append.
    """
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(value + "\n")
    return f"recorded {value}"


@tool(requires_approval=True)
def guarded_record(path: str, value: str) -> str:
    """Append a line to a file, only once a human approved it.

    Args:
        path: the file to append to; created if missing.
        value: the line to append.
    """
    return record(path, value)


@tool(requires_approval=True)
def guarded_note(path: str, value: str) -> str:
    """Append a line to a file once approved: a second gated tool, to tell tools apart.

    Args:
        path: the file to append to; created if missing.
        value: the line to append.
    """
    return record(path, value)


@tool(requires_approval="always")
def guarded_always(path: str, value: str) -> str:
    """Append a line to a file; a person approves every call, no standing approval counts.

    Args:
        path: the file to append to; created if missing.
        value: the line to append.
    """
    return record(path, value)


@tool(effect="read")
def big(size: int) -> str:
    """Return a string of the given size, to test the result size limit.

    Args:
        size: how many characters to return.
    """
    return "x" * size


@tool(effect="read")
async def big_async(size: int) -> str:
    """Return a string of the given size from an async tool (no thread), like the floor's.

    Args:
        size: how many characters to return.
    """
    return "x" * size


@tool(context=True)
def pick_account(ctx: ToolContext, query: str, log: str = "") -> str:
    """Ask a human which account is meant, then use it.

    Args:
        ctx: the tool context, passed by the runtime.
        query: what the model is looking for.
        log: a file to which every run of this tool appends a line (optional).
    """
    if log:
        with Path(log).open("a", encoding="utf-8") as f:
            f.write(f"run {ctx.idempotency_key}\n")
    choice = ctx.interrupt("account", reason=f"which account matches {query!r}?")
    return f"using {choice}"


@tool(context=True)
def confirm_twice(ctx: ToolContext, amount: int) -> str:
    """Ask for two confirmations in sequence.

    Args:
        ctx: the tool context, passed by the runtime.
        amount: the amount to confirm.
    """
    first = ctx.interrupt("confirm", reason=f"confirm {amount}?")
    second = ctx.interrupt("really", reason="are you sure?")
    return f"confirmed {first} then {second}"


@tool(effect="write")
def transfer(amount: int, to: str) -> str:
    """Send money (pretend).

    Args:
        amount: how much.
        to: to whom.
    """
    return f"sent {amount} to {to}"


@tool_policy("payments")
def payments(use: ToolUse) -> Verdict:
    """Deny transfers to a blocked name; require approval for large ones."""
    if use.name != "transfer":
        return Verdict.run()
    if use.input.get("to") == "mallory":
        return Verdict.deny("mallory is on the block list")
    if use.input.get("amount", 0) > 1000:
        return Verdict.require_approval("transfers over 1000 need approval")
    return Verdict.run()


@tool_policy("clocks")
def clocks(use: ToolUse) -> Verdict:
    """For MCP's time server: no clock of Atlantis; converting times needs a person."""
    if use.name == "get_current_time" and use.input.get("timezone") == "Atlantis/Capital":
        return Verdict.deny("Atlantis keeps no time")
    if use.name == "convert_time":
        return Verdict.require_approval("conversions are checked by a person")
    return Verdict.run()
