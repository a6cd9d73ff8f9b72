"""Model providers, one file each, chosen by the prefix of a model spec.

Adding a provider is a new file and one entry in ``PROVIDERS``; the agent loop never changes.
Providers are imported on first use, so a worker that only runs scripted sessions never
imports boto3.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from activities.models.base import DeltaCallback, ModelError, ModelProvider

# prefix -> (module, class); the class is called with the part of the spec after the prefix.
PROVIDERS: dict[str, tuple[str, str]] = {
    "scripted": ("activities.models.scripted", "ScriptedProvider"),
    "bedrock": ("activities.models.bedrock", "BedrockProvider"),
    "openai": ("activities.models.openai", "OpenAIProvider"),
}


def resolve_model(spec: str) -> ModelProvider:
    """The provider for a model spec ``<provider>:<model>``.

    Raises:
        ModelError: the spec is malformed or names an unknown provider, or the provider
            rejects the model name.
    """
    prefix, sep, rest = spec.partition(":")
    entry = PROVIDERS.get(prefix) if sep else None
    if entry is None:
        known = ", ".join(f"{p}:<...>" for p in sorted(PROVIDERS))
        raise ModelError(f"unknown model spec {spec!r}; expected one of {known}")
    module, name = entry
    factory: Callable[[str], ModelProvider] = getattr(importlib.import_module(module), name)
    return factory(rest)


__all__ = ["PROVIDERS", "DeltaCallback", "ModelError", "ModelProvider", "resolve_model"]
