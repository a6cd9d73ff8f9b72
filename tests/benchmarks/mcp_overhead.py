"""Cost of an MCP tool call against a plain ``@tool`` call, measured side by side in one run.

    python -m tests.benchmarks.mcp_overhead [--calls N]

Both go through the same activity, ``ToolActivities.run`` (validation, timeout, heartbeats,
result stored in a local store), in temporalio's ``ActivityEnvironment``: mcp-server-time's
``get_current_time`` over stdio against ``local_current_time``, an ``@tool`` doing the same
work in-process. Calls alternate, so both see the same machine load. Prints medians and p90s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import datetime
from zoneinfo import ZoneInfo

from temporalio.testing import ActivityEnvironment

from keel import ToolUse, open_store, tool
from keel.activities.mcp import parse_mcp_spec
from keel.activities.mcp.servers import McpServers
from keel.activities.tool_run import ToolActivities
from keel.workflows.activity_contracts import ToolRequest


@tool
def local_current_time(timezone: str) -> dict[str, object]:
    """The current time in a timezone, as mcp-server-time answers it.

    Args:
        timezone: IANA timezone name.
    """
    now = datetime.now(ZoneInfo(timezone))
    return {
        "timezone": timezone,
        "datetime": now.isoformat(timespec="seconds"),
        "day_of_week": now.strftime("%A"),
        "is_dst": bool(now.dst()),
    }


def request(name: str, i: int) -> ToolRequest:
    use = ToolUse(toolUseId=f"u{i}", name=name, input={"timezone": "Europe/Paris"})
    return ToolRequest(
        session_id="bench", tool_use=use, idempotency_key=f"bench/u{i}", timeout_s=30
    )


def summary(label: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p90 = ms[int(len(ms) * 0.9) - 1]
    return f"{label:<28} median {statistics.median(ms):7.3f} ms   p90 {p90:7.3f} ms   n={len(ms)}"


async def main(calls: int) -> None:
    servers = McpServers([parse_mcp_spec("time=mcp-server-time --local-timezone UTC")])
    env = ActivityEnvironment()
    with tempfile.TemporaryDirectory() as tmp:
        activities = ToolActivities(open_store(tmp), servers)
        timings: dict[str, list[float]] = {"get_current_time": [], "local_current_time": []}
        began = time.perf_counter()
        async with servers.running():
            started = time.perf_counter() - began
            for i in range(calls + 20):
                for name, bucket in timings.items():
                    t0 = time.perf_counter()
                    response = await env.run(activities.run, request(name, i))
                    spent = time.perf_counter() - t0
                    assert response.result is not None and response.result.status == "success"
                    if i >= 20:  # warm-up: first calls import and compile
                        bucket.append(spent)
    mcp_t, local_t = timings["get_current_time"], timings["local_current_time"]
    print(f"MCP server start + initialize + tools/list: {started * 1000:.0f} ms (once per worker)")
    print(summary("@tool local_current_time", local_t))
    print(summary("MCP get_current_time (stdio)", mcp_t))
    extra = statistics.median(mcp_t) - statistics.median(local_t)
    print(f"MCP overhead per call (median difference): {extra * 1000:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
