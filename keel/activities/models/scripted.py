"""The ``scripted:<path.json>`` provider: a deterministic model replaying a file of responses.

Used by tests and by the credential-free demo. The i-th call of a session (i = number of
assistant messages in the conversation it is given) returns ``responses[i]``; past the end is
an error. (``KEEL_SCRIPTED_LOG`` makes the model activity log every request a model is sent,
this one's included: see ``keel.activities.model_call``.)
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pydantic import Field, ValidationError

from keel.activities.models.base import DeltaCallback, ModelError
from keel.activities.models.declared import DeclaredProvider, ParsedSpec
from keel.workflows.activity_contracts import ModelRequest, ModelResponse
from keel.workflows.contracts import KeelModel
from keel.workflows.messages import ContentBlock, Message, TokenUsage


class ScriptedResponse(KeelModel):
    """One entry of a script's ``responses``.

    ``delay_s`` (a Keel extension, default 0) makes the model take that long to answer, to
    stand in for a slow provider in tests and demos. ``stream_s`` (likewise) streams the
    text word by word over that many seconds, after the delay, as a streaming model does
    (default 0: all at once).
    """

    content: list[ContentBlock]
    stopReason: str
    usage: TokenUsage = TokenUsage()
    delay_s: float = Field(default=0.0, ge=0, le=600)
    stream_s: float = Field(default=0.0, ge=0, le=600)


class Script(KeelModel):
    """A scripted model file."""

    responses: list[ScriptedResponse]


def load_script(path: Path) -> Script:
    """Read and validate a script file; parsed once per version of the file.

    Raises:
        ModelError: the file is missing or not a valid script, naming what is wrong.
    """
    try:
        info = path.stat()
    except OSError as err:
        raise ModelError(f"scripted model file {str(path)!r} cannot be read: {err}") from err
    return _parsed(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int, size: int) -> Script:
    """The script at ``path`` as it was at (``mtime_ns``, ``size``); the key of the cache."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ModelError(f"scripted model file {path!r} cannot be read: {err}") from err
    try:
        return Script.model_validate_json(raw)
    except ValidationError as err:
        raise ModelError(f"scripted model file {path!r} is not a valid script: {err}") from err


class ScriptedProvider(DeclaredProvider):
    """Replays ``responses[i]`` for the i-th model call of a session."""

    prefix: ClassVar[str] = "scripted"
    model_part: ClassVar[str] = "<path.json>"
    telemetry_name: ClassVar[str] = "keel.scripted"
    names_path: ClassVar[bool] = True

    def __init__(self, path: str, environ: Mapping[str, str] | None = None) -> None:
        """Create a provider for a script file.

        Args:
            path: the script's path, relative to the worker's working directory or absolute.
            environ: unused (every provider is given the worker's environment).

        Raises:
            ModelSpecError: no path.
        """
        self.path = Path(self.parse_spec(path).name)

    @classmethod
    def preflight(cls, parsed: ParsedSpec) -> None:
        """Refuse to start when the script file is not here.

        Raises:
            ModelError: no such file.
        """
        file = Path(parsed.name).expanduser().absolute()
        if not file.is_file():
            raise ModelError(f"scripted model file {parsed.name!r} not found (no file {file})")

    async def converse(self, request: ModelRequest, on_delta: DeltaCallback) -> ModelResponse:
        """Answer with the scripted response for this point of the conversation.

        A coroutine: nothing here waits on a network or a lock held elsewhere (the script is
        parsed once per version of the file; a stat checks the version), so the model
        activity runs it on the event loop, without a thread.
        """
        script = load_script(self.path)
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(script.responses):
            raise ModelError(
                f"scripted model {str(self.path)!r} has {len(script.responses)} responses; "
                f"call {index + 1} of session {request.session_id!r} is past the end"
            )
        entry = script.responses[index].model_copy(deep=True)  # the parsed script is shared
        if entry.delay_s:
            await asyncio.sleep(entry.delay_s)
        usage = entry.usage
        if not usage.totalTokens:
            usage = TokenUsage(
                inputTokens=usage.inputTokens,
                outputTokens=usage.outputTokens,
                totalTokens=usage.inputTokens + usage.outputTokens,
                unknown=usage.unknown,  # a script may stand for a server that reports none
            )
        if entry.stream_s:
            words = [w for b in entry.content for w in re.findall(r"\S+\s*|\s+", b.text or "")]
            for word in words:
                on_delta(word)
                await asyncio.sleep(entry.stream_s / len(words))
        else:
            for block in entry.content:
                on_delta(block.text or "")
        return ModelResponse(
            message=Message(role="assistant", content=entry.content),
            stopReason=entry.stopReason,
            usage=usage,
        )
