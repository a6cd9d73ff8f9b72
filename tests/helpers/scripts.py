"""Scripted-model responses and files: what the scripted model answers, call by call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SAMPLE_TOOLS = "tests.sample_tools"
JUDGES = "tests.judges"


def tool_use(use_id: str, name: str, **inputs: Any) -> dict[str, Any]:
    """A toolUse content block."""
    return {"toolUse": {"toolUseId": use_id, "name": name, "input": inputs}}


def text(value: str) -> dict[str, Any]:
    """A text content block."""
    return {"text": value}


def respond(
    *content: dict[str, Any], stop: str = "end_turn", tokens: int = 10, delay_s: float = 0
) -> dict[str, Any]:
    """One scripted model response."""
    entry: dict[str, Any] = {
        "content": list(content),
        "stopReason": stop,
        "usage": {"inputTokens": tokens, "outputTokens": tokens},
    }
    if delay_s:
        entry["delay_s"] = delay_s
    return entry


def write_script(path: Path, responses: Sequence[dict[str, Any]]) -> str:
    """Write a scripted model file; returns its model spec, ``scripted:<path>``."""
    path.write_text(json.dumps({"responses": list(responses)}))
    return f"scripted:{path}"
