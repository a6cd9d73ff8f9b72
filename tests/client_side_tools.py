"""Client-side tools for Keel's tests: contracts on the workers, bodies on the attached client.

Workers load this module (``--tools tests.client_side_tools``) and never run a body here;
``keel attach SESSION --tools tests.client_side_tools`` and ``KeelClient.serve_tools`` do.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from keel import ToolContext, tool

__all__ = ["Forecast", "append_local", "guarded_local", "local_forecast", "unattended", "wrong"]


class Forecast(BaseModel):
    """What ``local_forecast`` returns."""

    city: str
    celsius: float


@tool(runs_on="client", timeout_s=120)
def local_forecast(city: str) -> Forecast:
    """The forecast a program on the user's machine knows.

    Args:
        city: the city.
    """
    return Forecast(city=city, celsius=21.5)


@tool(runs_on="client", timeout_s=120, context=True)
def append_local(ctx: ToolContext, path: str, value: str) -> int:
    """Append a line to a file on the user's machine; returns how many lines it has.

    Each run first adds ``<pid> <idempotency key>`` to ``<path>.started``, then waits while
    ``<path>.hold`` exists (a test kills the client meanwhile).

    Args:
        ctx: the tool context, passed by the runtime.
        path: the file.
        value: the line to append.
    """
    with open(f"{path}.started", "a") as started:
        started.write(f"{os.getpid()} {ctx.idempotency_key}\n")
    while Path(f"{path}.hold").exists():
        time.sleep(0.05)
    with open(path, "a") as out:
        out.write(value + "\n")
    return len(Path(path).read_text().splitlines())


@tool(runs_on="client", timeout_s=2)
def unattended(question: str) -> str:  # type: ignore[empty-body]  # no body: a contract
    """A tool whose calls no client in the tests runs: they time out after 2 s.

    Args:
        question: anything.
    """
    ...


@tool(runs_on="client", timeout_s=120)
def wrong(n: int) -> int:
    """Declares an int and returns text, on the client.

    Args:
        n: a number.
    """
    return f"{n} apples"  # type: ignore[return-value]


@tool(runs_on="client", requires_approval=True, timeout_s=120)
def guarded_local(path: str) -> str:
    """Read a file on the user's machine, once a person approved it.

    Args:
        path: the file.
    """
    return Path(path).read_text()
