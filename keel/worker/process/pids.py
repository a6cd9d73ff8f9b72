"""Processes by pid, as ``/proc`` tells them apart: alive, and started when.

A pid is reused once its process is gone; the start time (``/proc/PID/stat``'s 22nd field,
clock ticks since boot) and the boot's id tell the process that wrote a record from a later
one with the same pid. Without ``/proc`` (not Linux), a pid that answers ``kill(pid, 0)`` is
taken for alive, and started at 0.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_PROC = Path("/proc")


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (zombies count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def started_at(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; None when it is gone.

    0 where ``/proc`` cannot tell (not Linux) and the process exists.
    """
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return 0 if alive(pid) else None
    fields = stat.rsplit(")", 1)[-1].split()
    # after the command in parentheses, field 3 (state) is fields[0]: 22 (starttime) is [19]
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else 0


@functools.cache
def boot_id() -> str:
    """This boot of the machine (``/proc/sys/kernel/random/boot_id``); "" where unknown.

    Read once: it cannot change while this process runs.
    """
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def same_process(pid: int, started: int, boot: str) -> bool:
    """Whether the process ``pid`` started at ``started`` in boot ``boot`` still runs."""
    if boot != boot_id():
        return False  # the machine restarted since: every process of then is gone
    now = started_at(pid)
    return now is not None and alive(pid) and (now == started or now == 0)
