"""Temporal Actions, as the dev server counts them: its ``action`` metric, by ``action_type``.

``temporal server start-dev --metrics-port N`` serves Prometheus text at
``http://127.0.0.1:N/metrics``; among it, one counter per kind of billable Action::

    action{action_type="grpc_StartWorkflowExecution",namespace="default",...} 1
    action{action_type="command_ScheduleActivityTask",namespace="default",...} 5
    action{action_type="grpc_RecordActivityTaskHeartbeat",namespace="default",...} 7
    action{action_type="grpc_QueryWorkflow",namespace="default",...} 24

(also ``grpc_ExecuteMultiOperation`` for an update-with-start,
``message_UpdateWorkflowExecution_Acceptance``, ``command_UpsertWorkflowSearchAttributes``,
``grpc_SignalWorkflowExecution``, ``command_StartTimer``...: whatever the server counts).
``DescribeWorkflowExecution`` and ``GetWorkflowExecutionHistory`` (long polls included) are
not Actions, and the meter's own reads of the metric are not requests to Temporal.

The server publishes its counters about once a second, so a reading is taken once it has
stayed the same across more than one publication (:meth:`ActionMeter.settled`).
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections import Counter

from tests.benchmarks.heartbeats import MetricsServer

# The dev server's metrics reach the endpoint about once a second (measured: a counter
# changed 0.6 s after the work, then stayed); two equal readings this far apart mean the
# work before the first one is all counted.
QUIET_S = 1.5
SCRAPE_EVERY_S = 0.25
_ACTION = re.compile(r"^action\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class Actions(Counter[str]):
    """Actions by ``action_type``; ``total`` is their sum."""

    @property
    def total(self) -> float:
        """Every type's Actions together."""
        return float(sum(self.values()))

    def minus(self, before: Actions) -> Actions:
        """The Actions counted since ``before`` (types that did not change left out)."""
        return Actions({k: v - before.get(k, 0) for k, v in self.items() if v != before.get(k, 0)})


def parse_actions(text: str, namespace: str) -> Actions:
    """The ``action`` counters of one namespace in a Prometheus text page, by type."""
    found = Actions()
    for line in text.splitlines():
        matched = _ACTION.match(line)
        if matched is None:
            continue
        labels = dict(_LABEL.findall(matched["labels"]))
        if labels.get("namespace") == namespace:
            found[labels.get("action_type", "?")] += float(matched["value"])
    return found


class ActionMeter:
    """Reads a dev server's ``action`` counters: before and after a measured side, and the diff.

    Nothing else may run on the server's namespace between the two readings.
    """

    def __init__(self, metrics_url: str, namespace: str = "default") -> None:
        """The server's metrics page and the namespace whose Actions count."""
        self.metrics_url = metrics_url
        self.namespace = namespace

    def read(self) -> Actions:
        """The counters as the endpoint serves them now (maybe a second old)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:  # noqa: S310
            return parse_actions(response.read().decode(), self.namespace)

    async def settled(self, limit_s: float = 30.0) -> Actions:
        """The counters once they stayed the same for ``QUIET_S`` (at most ``limit_s``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        last = await asyncio.to_thread(self.read)
        since = loop.time()
        while loop.time() < deadline:
            await asyncio.sleep(SCRAPE_EVERY_S)
            now = await asyncio.to_thread(self.read)
            if now != last:
                last, since = now, loop.time()
            elif loop.time() - since >= QUIET_S:
                break
        return last


class ActionServer(MetricsServer):
    """A fresh in-memory dev server, headless and quiet, with its metrics on a free port.

    It is the heartbeat benchmark's ``MetricsServer``, read by action type. It has the
    ``KeelStatus`` search attribute (as ``keel dev``), which the benchmark reads
    (``DescribeWorkflowExecution``: no Action) to see a turn end without querying it.
    """

    def meter(self) -> ActionMeter:
        """A meter of this server's ``default`` namespace."""
        return ActionMeter(f"http://127.0.0.1:{self.metrics_port}/metrics", self.namespace)
