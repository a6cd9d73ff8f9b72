"""The floor: a minimal hand-written Temporal agent loop, to measure Keel against.

One workflow (``FloorLoop``) runs cycles of one model activity and one tool activity. The
model activity gets the FULL message list every time (plain dicts in Converse shape, the
default data converter, the default sandbox): what a naive loop on Temporal does. The model
answers with one ``toolUse`` until ``cycles`` tool cycles have run, then with text, like the
scripted model Keel is measured with; the tool returns a text of ``result_size`` characters,
like ``tests.sample_tools.big``.

``model_delay_s`` and ``tool_delay_s`` (default 0, left out of the payloads then) make each
model call and tool run sleep that long, like the scripted model's ``delay_s`` and
``tests.sample_tools.slow`` (for ``tests.benchmarks.actions``); each activity's timeout grows
by its delay.

With ``hold`` set, the workflow stays open after its cycles until the ``release`` signal, so
it stays in the worker's cache (for the memory figure).

A second workflow (``FloorParked``) is the floor of the parked-sessions benchmark
(``tests.benchmarks.parked``), shaped like Keel's parked session: a model call (``floor.model``,
the full message list) asks for a recording tool activity (``floor.record``: a line appended
to the session's own file, like ``tests.sample_tools.record``); a second model call asks for
another, which waits for the ``approve`` update; a last model call answers; the turn is then
done (the ``done``
query) and the workflow stays open, as a Keel session does after its turn, until ``release``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

WORKFLOW = "FloorLoop"
MODEL_ACTIVITY = "floor.model"
TOOL_ACTIVITY = "floor.tool"
PARKED_WORKFLOW = "FloorParked"
RECORD_ACTIVITY = "floor.record"
# Each started activity sets a server timer for its timeout; it fires (and finds the activity
# done) that long after the start. 10 s is the delay of Keel's own activity timers (their
# heartbeat timeout), so both systems' timers fire while the runner lets a run settle; with
# 60 s, a floor run's timers fired during the runs after it (Keel's, in ABBA order).
TIMEOUT = timedelta(seconds=10)


@activity.defn(name=MODEL_ACTIVITY)
async def floor_model(request: dict[str, Any]) -> dict[str, Any]:
    """Answer like the scripted model: one toolUse per cycle, then a final text."""
    messages = request["messages"]
    if request.get("model_delay_s"):
        await asyncio.sleep(request["model_delay_s"])
    index = sum(1 for m in messages if m["role"] == "assistant")
    if index < request["cycles"]:
        inputs: dict[str, Any] = {"size": request["result_size"]}
        if request.get("tool_delay_s"):
            inputs["delay_s"] = request["tool_delay_s"]
        use = {"toolUseId": f"c{index}", "name": "big", "input": inputs}
        return {
            "message": {"role": "assistant", "content": [{"toolUse": use}]},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 10, "totalTokens": 20},
        }
    return {
        "message": {"role": "assistant", "content": [{"text": "done"}]},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 10, "totalTokens": 20},
    }


@activity.defn(name=TOOL_ACTIVITY)
async def floor_tool(use: dict[str, Any]) -> dict[str, Any]:
    """Run the one tool: a text of the requested size, as a Converse toolResult."""
    size = int(use["input"]["size"])
    if use["input"].get("delay_s"):
        await asyncio.sleep(use["input"]["delay_s"])
    return {"toolUseId": use["toolUseId"], "status": "success", "content": [{"text": "x" * size}]}


@workflow.defn(name=WORKFLOW)
class FloorLoop:
    """Model call, tool call, append both; until the model stops asking for tools."""

    def __init__(self) -> None:
        self._done = False
        self._released = False

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "loop"}]}]
        calls = 0
        request: dict[str, Any] = {"cycles": input["cycles"], "result_size": input["result_size"]}
        delays = {k: input[k] for k in ("model_delay_s", "tool_delay_s") if input.get(k)}
        request.update(delays)
        model_timeout = TIMEOUT + timedelta(seconds=delays.get("model_delay_s", 0))
        tool_timeout = TIMEOUT + timedelta(seconds=delays.get("tool_delay_s", 0))
        while True:
            response = await workflow.execute_activity(
                MODEL_ACTIVITY,
                {"messages": messages, **request},
                start_to_close_timeout=model_timeout,
            )
            calls += 1
            message = response["message"]
            messages.append(message)
            uses = [b["toolUse"] for b in message["content"] if "toolUse" in b]
            if response["stopReason"] != "tool_use" or not uses:
                break
            results = []
            for use in uses:
                result = await workflow.execute_activity(
                    TOOL_ACTIVITY, use, start_to_close_timeout=tool_timeout
                )
                results.append({"toolResult": result})
            messages.append({"role": "user", "content": results})
        self._done = True
        if input.get("hold"):
            await workflow.wait_condition(lambda: self._released)
        return {"model_calls": calls, "messages": len(messages)}

    @workflow.signal
    def release(self) -> None:
        self._released = True

    @workflow.query
    def done(self) -> bool:
        return self._done


@activity.defn(name=RECORD_ACTIVITY)
async def floor_record(effect: dict[str, Any]) -> str:
    """Append ``effect["value"]`` as a line to the file ``effect["path"]``: an effect counted.

    Args:
        effect: ``path`` (created if missing) and ``value`` (the line).

    Returns:
        What was recorded, like ``tests.sample_tools.record``.
    """
    with Path(effect["path"]).open("a", encoding="utf-8") as f:
        f.write(effect["value"] + "\n")
    return f"recorded {effect['value']}"


@workflow.defn(name=PARKED_WORKFLOW)
class FloorParked:
    """Record, wait for a person's ``approve``, record again; then stay open until ``release``."""

    def __init__(self) -> None:
        self._parked = False
        self._approved = False
        self._done = False
        self._released = False

    @workflow.run
    async def run(self, input: dict[str, Any]) -> dict[str, Any]:
        path = input["path"]
        messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "go"}]}]
        # Keel's shape: model, record, model, (approval), record, model; the model activity
        # gets the full message list each time, as the floor's loop does.
        for value in ("cycle", "approved"):
            response = await self._model(messages)
            (use,) = [b["toolUse"] for b in response["message"]["content"] if "toolUse" in b]
            if value == "approved":
                self._parked = True
                await workflow.wait_condition(lambda: self._approved)
            await workflow.execute_activity(
                RECORD_ACTIVITY, {"path": path, "value": value}, start_to_close_timeout=TIMEOUT
            )
            result = {"toolUseId": use["toolUseId"], "status": "success", "content": []}
            messages.append({"role": "user", "content": [{"toolResult": result}]})
        await self._model(messages)
        self._done = True
        await workflow.wait_condition(lambda: self._released)
        return {"effects": 2}

    async def _model(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The floor's model: a toolUse for each of the two records, then text."""
        response: dict[str, Any] = await workflow.execute_activity(
            MODEL_ACTIVITY,
            {"messages": messages, "cycles": 2, "result_size": 0},
            start_to_close_timeout=TIMEOUT,
        )
        messages.append(response["message"])
        return response

    @workflow.update
    def approve(self) -> bool:
        """Let the parked turn go on; answers once the decision is in, not when the turn ends."""
        self._approved = True
        return True

    @approve.validator
    def _approvable(self) -> None:
        """Reject an approval while nothing waits for one (nothing reaches the history)."""
        if not self._parked or self._approved:
            raise ValueError("nothing waits for an approval")

    @workflow.signal
    def release(self) -> None:
        self._released = True

    @workflow.query
    def parked(self) -> bool:
        """Whether the turn waits for the approval (or went past it)."""
        return self._parked

    @workflow.query
    def done(self) -> bool:
        """Whether the turn ended."""
        return self._done
