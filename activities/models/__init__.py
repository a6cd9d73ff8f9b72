"""Model providers, one file each, chosen by the prefix of a model spec.

Adding a provider is a new file and one entry in ``PROVIDERS``; the agent loop never changes.
"""

from __future__ import annotations

from collections.abc import Callable

from activities.models.base import ModelError, ModelProvider
from activities.models.scripted import ScriptedProvider

PROVIDERS: dict[str, Callable[[str], ModelProvider]] = {
    "scripted": ScriptedProvider,
}


def resolve_model(spec: str) -> ModelProvider:
    """The provider for a model spec ``<provider>:<model>``.

    Raises:
        ModelError: the spec is malformed or names an unknown provider.
    """
    prefix, sep, rest = spec.partition(":")
    factory = PROVIDERS.get(prefix) if sep else None
    if factory is None:
        known = ", ".join(f"{p}:<...>" for p in sorted(PROVIDERS))
        raise ModelError(f"unknown model spec {spec!r}; expected one of {known}")
    return factory(rest)


__all__ = ["PROVIDERS", "ModelError", "ModelProvider", "resolve_model"]
