"""The Strands peer's workload and worker; runs in the peer's venv, not in Keel's environment.

The same loop as Keel's and the floor's, written as the official plugin
(``temporalio-strands-agents``) has it written: a ``TemporalAgent`` inside a workflow
(``StrandsLoop``), whose model calls run as the plugin's ``invoke_model`` activity and whose
one tool is a Temporal activity turned into a Strands tool (``activity_as_tool``). The model
is a Strands ``Model`` registered with the plugin, scripted like Keel's and the floor's: one
``toolUse`` of ``big_async`` (``{"size": result_size}``) per cycle until ``cycles`` tool
cycles have run, then the text ``done``, streamed as Bedrock's Converse stream events; the
tool returns a text of ``size`` characters, like ``tests.sample_tools.big_async``. Model
calls and the tool have a 10 s start-to-close timeout, as the floor's activities; the input's
``model_delay_s`` and ``tool_delay_s`` (default 0) make them sleep that long first, their
timeouts longer by as much.

The agent keeps the whole conversation (``NullConversationManager``), as Keel and the floor
do; Strands' default (a sliding window of 40 messages) would show the model only the last 20
cycles, another workload. It prints nothing (``callback_handler=None``).

Usage (from the repository's root, with the venv's python)::

    VENV/bin/python -m tests.benchmarks.peer_strands --address 127.0.0.1:7233 --task-queue q

It prints ``ready`` once the worker polls and shuts it down on SIGTERM, like
``tests.benchmarks.worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from strands.agent.conversation_manager import NullConversationManager
from strands.models import Model
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.strands_agents import StrandsPlugin, TemporalAgent
from temporalio.strands_agents.workflow import activity_as_tool
from temporalio.worker import Worker

from tests.benchmarks.peer import STRANDS

MODEL = "scripted"
TIMEOUT = timedelta(seconds=10)
USAGE = {"inputTokens": 10, "outputTokens": 10, "totalTokens": 20}


@activity.defn(name="big_async")
async def big_async(size: int, delay_s: float = 0.0) -> str:
    """Return a string of the given size.

    Args:
        size: how many characters to return.
        delay_s: sleep this long first (``tests.benchmarks.actions``'s slow tools).
    """
    if delay_s:
        await asyncio.sleep(delay_s)
    return "x" * size


class ScriptedModel(Model):
    """One ``toolUse`` per call until ``cycles`` have run, then a final text.

    ``cycles`` and ``result_size`` come with each call, in the agent's invocation state.
    """

    def update_config(self, **model_config: Any) -> None:
        return None

    def get_config(self) -> dict[str, Any]:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers with tool uses and text only")

    async def stream(  # type: ignore[override]
        self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        state = kwargs.get("invocation_state") or {}
        if state.get("model_delay_s"):
            await asyncio.sleep(float(state["model_delay_s"]))
        index = sum(1 for m in messages if m["role"] == "assistant")
        yield {"messageStart": {"role": "assistant"}}
        if index < int(state["cycles"]):
            start = {"toolUse": {"toolUseId": f"c{index}", "name": big_async.__name__}}
            inputs: dict[str, Any] = {"size": int(state["result_size"])}
            if state.get("tool_delay_s"):
                inputs["delay_s"] = float(state["tool_delay_s"])
            arguments = json.dumps(inputs)
            yield {"contentBlockStart": {"start": start}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockDelta": {"delta": {"text": "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
        yield {"metadata": {"usage": USAGE, "metrics": {"latencyMs": 0}}}


@workflow.defn(name=STRANDS.workflow)
class StrandsLoop:
    """One agent turn of ``cycles`` tool cycles; with ``hold``, open until ``release``."""

    def __init__(self) -> None:
        self._done = False
        self._released = False

    @workflow.run
    async def run(self, input: dict[str, Any]) -> str:
        delays = {k: input[k] for k in ("model_delay_s", "tool_delay_s") if input.get(k)}
        tool_timeout = TIMEOUT + timedelta(seconds=delays.get("tool_delay_s", 0))
        agent = TemporalAgent(
            model=MODEL,
            start_to_close_timeout=TIMEOUT + timedelta(seconds=delays.get("model_delay_s", 0)),
            tools=[activity_as_tool(big_async, start_to_close_timeout=tool_timeout)],
            conversation_manager=NullConversationManager(),
            callback_handler=None,
        )
        state = {"cycles": input["cycles"], "result_size": input["result_size"], **delays}
        result = await agent.invoke_async("loop", invocation_state=state)
        self._done = True
        if input.get("hold"):
            await workflow.wait_condition(lambda: self._released)
        return str(result)

    @workflow.signal
    def release(self) -> None:
        self._released = True

    @workflow.query
    def done(self) -> bool:
        return self._done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--max-cached-workflows", type=int, default=None)
    parser.add_argument("--freeze-heap", choices=["yes", "no"], default="no")
    args = parser.parse_args()
    plugin = StrandsPlugin(models={MODEL: ScriptedModel})
    client = await Client.connect(args.address, namespace="default", plugins=[plugin])
    options: dict[str, Any] = {}
    if args.max_cached_workflows is not None:
        options["max_cached_workflows"] = args.max_cached_workflows
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[StrandsLoop],
        activities=[big_async],
        **options,
    )
    if args.freeze_heap == "yes":
        gc.collect()
        gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    os._exit(0)
