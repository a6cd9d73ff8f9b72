"""What the benchmarks read of another process: its CPU time and its resident memory."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import time
from pathlib import Path

CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads, live and ended), in seconds.

    Read from the process's CPU-time clock (``clock_getcpuclockid``: nanoseconds) where the
    C library has it, else from ``/proc/PID/stat`` (clock ticks: 10 ms on most kernels, too
    coarse for a turn of a few hundred milliseconds).
    """
    clock = _cpu_clock(pid)
    if clock is not None:
        with contextlib.suppress(OSError):
            return time.clock_gettime(clock)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """The C library, loaded once; None where there is none to find."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@functools.lru_cache(maxsize=64)
def _cpu_clock(pid: int) -> int | None:
    """The clock id of a process's CPU time, or None where the C library has none."""
    libc = _libc()
    if libc is None:
        return None
    clock = ctypes.c_int()
    try:
        failed = libc.clock_getcpuclockid(pid, ctypes.byref(clock))
    except AttributeError:
        return None
    return None if failed else clock.value


def rss_bytes(pid: int) -> int:
    """A process's resident set size (``VmRSS``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
