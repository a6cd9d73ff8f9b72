"""Model providers, one file each, chosen by the prefix of a model spec.

Adding a provider is a new file and one entry in ``PROVIDERS``; the agent loop never changes.
Providers are imported on first use (in a thread, by the model activity), so a worker that
only runs scripted sessions never imports boto3. A provider's ``converse`` is either blocking
(``ModelProvider``: run in a thread) or a coroutine (``AsyncModelProvider``: run on the loop).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

from keel.activities.models.base import (
    AnyModelProvider,
    AsyncModelProvider,
    ContextTooLong,
    DeltaCallback,
    ModelError,
    ModelProvider,
    ModelTransientError,
    abort_call,
    converse_tool_config,
    is_async_provider,
)

# prefix -> (module, class); the class is called with the part of the spec after the prefix.
PROVIDERS: dict[str, tuple[str, str]] = {
    "scripted": ("keel.activities.models.scripted", "ScriptedProvider"),
    "bedrock": ("keel.activities.models.bedrock", "BedrockProvider"),
    "openai": ("keel.activities.models.openai", "OpenAIProvider"),
}


def parse_model_spec(spec: str) -> tuple[str, str]:
    """Split a model spec ``<provider>:<model>`` into the provider's prefix and the rest.

    Raises:
        ModelError: the spec is malformed or names an unknown provider.
    """
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix not in PROVIDERS:
        known = ", ".join(f"{p}:<...>" for p in sorted(PROVIDERS))
        raise ModelError(f"unknown model spec {spec!r}; expected one of {known}")
    return prefix, rest


def resolve_model(spec: str, environ: Mapping[str, str] | None = None) -> AnyModelProvider:
    """The provider for a model spec ``<provider>:<model>``.

    ``environ``: the worker's environment, read once by its settings (``Settings.environ``):
    a provider takes its ecosystem's variables from it (``OPENAI_BASE_URL``, say).

    Raises:
        ModelError: the spec is malformed or names an unknown provider, or the provider
            rejects the model name.
    """
    prefix, rest = parse_model_spec(spec)
    module, name = PROVIDERS[prefix]
    factory: Callable[[str, Mapping[str, str]], AnyModelProvider] = getattr(
        importlib.import_module(module), name
    )
    return factory(rest, environ or {})


def provider_imported(spec: str) -> bool:
    """Whether ``resolve_model(spec)`` imports nothing: its provider's module is loaded.

    An unknown prefix counts as imported (resolving it only raises ``ModelError``).
    """
    entry = PROVIDERS.get(spec.partition(":")[0])
    return entry is None or entry[0] in sys.modules


__all__ = [
    "PROVIDERS",
    "AnyModelProvider",
    "AsyncModelProvider",
    "ContextTooLong",
    "DeltaCallback",
    "ModelError",
    "ModelProvider",
    "ModelTransientError",
    "abort_call",
    "converse_tool_config",
    "is_async_provider",
    "parse_model_spec",
    "provider_imported",
    "resolve_model",
]
