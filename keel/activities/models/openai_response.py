"""Chat-completions answers as one Converse assistant message, stop reason and usage.

Text deltas form one text block, followed by one toolUse block per tool call in index order.
A call's id becomes the ``toolUseId``; a call without an id (or with one that is longer than
64 characters or already used in the conversation) gets the stable id
``call_<turn>_<cycle>_<index>``, unique within the session so that id-less servers do not
trip the workflow's duplicate-id check on the next cycle. Arguments that are not a complete
JSON object become the input ``{}``. Finish reasons: ``stop`` -> ``end_turn`` (``tool_use``
when the message carries tool calls, as some Ollama versions report ``stop`` for them;
``stop_sequence`` when vLLM names a matched stop sequence), ``tool_calls`` -> ``tool_use``,
``length`` -> ``max_tokens``, ``content_filter`` -> ``content_filtered``; others pass through.
Usage the server does not report (no ``usage`` object: llama-cpp-python never sends one in a
stream) is ``TokenUsage(unknown=True)``, never a silent 0.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from keel.activities.models.openai_errors import clip
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.messages import ContentBlock, Message, TokenUsage, ToolUse

logger = logging.getLogger(__name__)

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}
MAX_TOOL_USE_ID = 64

JSON = dict[str, Any]


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class Assembler:
    """Collects stream chunks (or one non-streamed body) into one assistant message."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _CallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    matched_stop: str | None = None
    usage: JSON | None = None

    def add(self, chunk: JSON) -> str:
        """Take one chunk (or a whole ``chat.completion``); returns its text delta."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        delta_text = ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            content = _content_text(delta.get("content"))
            if content:
                self.text.append(content)
                delta_text += content
            calls = delta.get("tool_calls")
            for position, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict):
                    self._add_call(position, call)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
            matched = choice.get("stop_reason")  # vLLM: the stop string that ended the output
            if isinstance(matched, str):
                self.matched_stop = matched
        return delta_text

    def _add_call(self, position: int, call: JSON) -> None:
        call_id = call.get("id") if isinstance(call.get("id"), str) else ""
        index = call.get("index")
        if not isinstance(index, int):
            # servers that omit the index send whole calls: tell them apart by id
            known = [i for i, parts in self.calls.items() if call_id and parts.id == call_id]
            index = known[0] if known else (len(self.calls) if call_id else position)
        parts = self.calls.setdefault(index, _CallParts())
        if call_id and not parts.id:
            parts.id = call_id
        function = call.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and not parts.name:
            parts.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            parts.arguments.append(arguments)
        elif isinstance(arguments, dict):
            parts.arguments.append(json.dumps(arguments))

    def response(self, request: ModelRequest) -> ModelResponse:
        """The assembled assistant message, stop reason and usage."""
        content: list[ContentBlock] = []
        text = "".join(self.text)
        if text:
            content.append(ContentBlock(text=text))
        used = {u.toolUseId for m in request.messages for b in m.content if (u := b.toolUse)}
        for index in sorted(self.calls):
            parts = self.calls[index]
            if not parts.name:
                logger.warning("dropping tool call %s: the server sent no function name", index)
                continue
            use_id = parts.id
            if not use_id or len(use_id) > MAX_TOOL_USE_ID or use_id in used:
                use_id = _generated_id(request, index, used)
            used.add(use_id)
            content.append(
                ContentBlock(
                    toolUse=ToolUse(
                        toolUseId=use_id,
                        name=parts.name[:MAX_TOOL_USE_ID],
                        input=_parse_arguments("".join(parts.arguments), parts.name),
                    )
                )
            )
        return ModelResponse(
            message=Message(role="assistant", content=content),
            stopReason=self._stop_reason(request, has_calls=any(b.toolUse for b in content)),
            usage=self._token_usage(),
        )

    def _stop_reason(self, request: ModelRequest, *, has_calls: bool) -> str:
        reason = self.finish_reason
        if reason is None:  # [DONE] without a finish reason
            return "tool_use" if has_calls else "end_turn"
        if reason == "stop":
            if has_calls:
                return "tool_use"
            stops = request.inference.stopSequences if request.inference else None
            if self.matched_stop is not None and stops and self.matched_stop in stops:
                return "stop_sequence"
        return FINISH_REASONS.get(reason, reason)

    def _token_usage(self) -> TokenUsage:
        if self.usage is None:  # not reported: unknown, not 0
            return TokenUsage(unknown=True)
        usage = self.usage
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        total = _int(usage.get("total_tokens")) or prompt + completion
        return TokenUsage(inputTokens=prompt, outputTokens=completion, totalTokens=total)


def _generated_id(request: ModelRequest, index: int, used: set[str]) -> str:
    base = f"call_{request.turn}_{request.cycle}_{index}"
    candidate, n = base, 1
    while candidate in used:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


def _parse_arguments(raw: str, name: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
        if isinstance(value, str):  # some models encode the arguments twice
            value = json.loads(value)
    except ValueError:
        logger.warning("tool call %s: arguments are not complete JSON: %s", name, clip(raw))
        return {}
    if not isinstance(value, dict):
        logger.warning("tool call %s: arguments are not a JSON object: %s", name, clip(raw))
        return {}
    return value


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
