"""Structured output: the ``final_result`` tool a session with an output schema offers.

The model ends a turn with structured output by calling ``final_result``; the model activity
checks the call's input against the schema (``ModelResponse.output_errors``), so the
workflow only reads a recorded verdict and stays deterministic.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keel.workflows.contracts import ToolSpec
from keel.workflows.messages import ToolResult, ToolResultContent, ToolUse, error_result

OUTPUT_TOOL = "final_result"
OUTPUT_DESCRIPTION = (
    "Give the final result of this task. Call it once, when you are done, with input that "
    "matches its schema; the task ends with that result."
)
ACCEPTED_TEXT = "final result accepted"


def output_tool_spec(schema: dict[str, Any]) -> ToolSpec:
    """The spec of the ``final_result`` tool: its input schema is the output schema."""
    return ToolSpec(name=OUTPUT_TOOL, description=OUTPUT_DESCRIPTION, inputSchema=schema)


def accepted_output(
    uses: Sequence[ToolUse], errors: Mapping[str, list[str]] | None
) -> ToolUse | None:
    """The first ``final_result`` use whose input the activity found valid, if any."""
    for use in uses:
        if use.name == OUTPUT_TOOL and errors is not None and errors.get(use.toolUseId) == []:
            return use
    return None


def rejection(use: ToolUse, errors: Mapping[str, list[str]] | None) -> ToolResult:
    """The error toolResult telling the model why its ``final_result`` input is invalid."""
    found = (errors or {}).get(use.toolUseId)
    if not found:
        text = "final_result was not checked against the output schema; call it again"
    else:
        text = "final_result input does not match the output schema: " + "; ".join(found)
    return error_result(use.toolUseId, text)


def closing_results(uses: Sequence[ToolUse], accepted: ToolUse) -> dict[str, ToolResult]:
    """Results for a message that ended the turn with ``accepted``: nothing else runs (S5)."""
    results: dict[str, ToolResult] = {}
    for use in uses:
        if use.toolUseId == accepted.toolUseId:
            results[use.toolUseId] = ToolResult(
                toolUseId=use.toolUseId,
                content=[ToolResultContent(text=ACCEPTED_TEXT)],
                status="success",
            )
        else:
            results[use.toolUseId] = error_result(
                use.toolUseId, "tool was not run: the turn ended with final_result"
            )
    return results
