"""Model providers, one class each, chosen by the prefix of a model spec.

A provider class declares its spec prefix, options, telemetry name and preflight on itself
(``keel.activities.models.declared.DeclaredProvider``); adding a provider is a new class and
one entry in ``PROVIDER_CLASSES``, from which every registry derives. The provider modules
import nothing heavy (Bedrock's boto3 is imported by its first call, in its thread), so
checking a spec is cheap anywhere. A provider's ``converse`` is either blocking
(``ModelProvider``: run in a thread) or a coroutine (``AsyncModelProvider``: run on the loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

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
from keel.activities.models.bedrock import BedrockProvider
from keel.activities.models.declared import DeclaredProvider, ModelSpecError, ParsedSpec
from keel.activities.models.openai import OpenAIProvider
from keel.activities.models.scripted import ScriptedProvider

PROVIDER_CLASSES: tuple[type[DeclaredProvider], ...] = (
    BedrockProvider,
    OpenAIProvider,
    ScriptedProvider,
)
# prefix -> provider class, called with the part of the spec after the prefix and the
# worker's environment (tests add providers of their own here).
PROVIDERS: dict[str, type[DeclaredProvider]] = {c.prefix: c for c in PROVIDER_CLASSES}


def provider_class(spec: str) -> tuple[type[DeclaredProvider], str]:
    """The provider class a model spec ``<provider>:<model>`` names, and the rest of it.

    Raises:
        ModelSpecError: the spec is malformed or names an unknown provider.
    """
    prefix, sep, rest = spec.partition(":")
    found = PROVIDERS.get(prefix) if sep else None
    if found is None:
        known = ", ".join(PROVIDERS[p].usage() for p in sorted(PROVIDERS))
        raise ModelSpecError(f"unknown model spec {spec!r}; expected one of {known}")
    return found, rest


def check_model_spec(spec: str) -> ParsedSpec:
    """Check a model spec without any I/O: its provider, model and options.

    Raises:
        ModelSpecError: naming the provider or option that is wrong and what it takes.
    """
    cls, rest = provider_class(spec)
    return cls.parse_spec(rest)


def preflight(spec: str) -> None:
    """Check a spec, then what a worker in this process would find missing for it.

    Raises:
        ModelError: the spec is wrong, or its provider's preflight failed (no scripted file,
            no AWS credentials).
    """
    cls, rest = provider_class(spec)
    cls.preflight(cls.parse_spec(rest))


def telemetry_name(spec: str) -> str:
    """The ``gen_ai.provider.name`` of a spec's provider (its prefix when unknown)."""
    prefix = spec.partition(":")[0]
    cls = PROVIDERS.get(prefix)
    return cls.telemetry_name if cls is not None else prefix


def path_prefixes() -> frozenset[str]:
    """The prefixes of providers whose spec, after ``<prefix>:``, is the path of a file."""
    return frozenset(c.prefix for c in PROVIDERS.values() if c.names_path)


def resolve_model(spec: str, environ: Mapping[str, str] | None = None) -> AnyModelProvider:
    """The provider for a model spec ``<provider>:<model>``.

    ``environ``: the worker's environment, read once by its settings (``Settings.environ``):
    a provider takes its ecosystem's variables from it (``OPENAI_BASE_URL``, say).

    Raises:
        ModelError: the spec is malformed or names an unknown provider, or the provider
            rejects the model name or an option.
    """
    cls, rest = provider_class(spec)
    # every provider class has a converse (ModelProvider or AsyncModelProvider)
    return cast("AnyModelProvider", cls(rest, environ or {}))


__all__ = [
    "PROVIDERS",
    "PROVIDER_CLASSES",
    "AnyModelProvider",
    "AsyncModelProvider",
    "ContextTooLong",
    "DeclaredProvider",
    "DeltaCallback",
    "ModelError",
    "ModelProvider",
    "ModelSpecError",
    "ModelTransientError",
    "abort_call",
    "check_model_spec",
    "converse_tool_config",
    "is_async_provider",
    "path_prefixes",
    "preflight",
    "provider_class",
    "resolve_model",
    "telemetry_name",
]
