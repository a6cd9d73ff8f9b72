"""What a model provider declares on its class: spec prefix, options, checks, telemetry name.

A provider class subclasses ``DeclaredProvider`` and sets its class variables; the registries
(``keel.activities.models.PROVIDERS``, the tracing name, the client's path specs, the CLI's
preflight) are read from these. Checking a spec (``DeclaredProvider.parse_spec``) does no I/O
and imports nothing: the CLI, ``KeelClient`` and agent files check a spec before anything
starts, and the worker checks it again when it builds the provider.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from keel.activities.models.base import ModelError

T = TypeVar("T")


class ModelSpecError(ModelError):
    """A model spec that names no known provider, no model, or an option its provider refuses.

    Its message names the option and the values it takes; callers prefix where the spec came
    from (``--model: ``, an agent file's key and line).
    """


@dataclass(frozen=True)
class Option(Generic[T]):
    """One ``?key=value`` option of a provider's spec.

    Attributes:
        name: the key.
        takes: the values it takes, as words (``a number of seconds > 0``).
        read: the value from its text; raises ``ValueError`` for a value it does not take.
        default: the value when the spec does not give it.
        about: what it does, one sentence (the docs' options table).
    """

    name: str
    takes: str
    read: Callable[[str], T]
    default: T
    about: str = ""


def flag(text: str) -> bool:
    """``true|false`` (also ``1|0``, ``yes|no``)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(text)


def seconds(text: str) -> float:
    """A finite number of seconds greater than 0."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def one_of(*values: str) -> Callable[[str], str]:
    """A reader taking one of ``values`` (case-insensitive)."""

    def read(text: str) -> str:
        if text.lower() not in values:
            raise ValueError(text)
        return text.lower()

    return read


def at_least(least: int) -> Callable[[str], int | None]:
    """A reader taking a whole number of at least ``least``."""

    def read(text: str) -> int | None:
        if not text.isdigit() or int(text) < least:
            raise ValueError(text)
        return int(text)

    return read


_AWS_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")


def aws_region(text: str) -> str | None:
    """An AWS region's name: ``eu-west-1``, ``us-gov-west-1``."""
    if not _AWS_REGION.fullmatch(text):
        raise ValueError(text)
    return text


@dataclass(frozen=True)
class ParsedSpec:
    """A checked spec: the model (or path) named after the prefix, and each option's value."""

    name: str
    values: Mapping[str, object] = field(default_factory=dict)

    def get(self, option: Option[T]) -> T:
        """The value of ``option``: as given, or its default."""
        value: Any = self.values.get(option.name, option.default)
        return value  # type: ignore[no-any-return]  # read by option.read, typed by it


class DeclaredProvider:
    """What every provider class declares; the provider itself is built per model call.

    Class variables:
        prefix: the spec's ``<prefix>:``.
        model_part: what follows the prefix, as the docs write it (``<model>``).
        telemetry_name: its ``gen_ai.provider.name`` in traces.
        options: the ``?key=value`` options its spec takes.
        names_path: whether what follows the prefix is a file's path (the client resolves
            it; the spec takes no options then, as a path may hold ``?``).
    """

    prefix: ClassVar[str]
    model_part: ClassVar[str] = "<model>"
    telemetry_name: ClassVar[str]
    options: ClassVar[tuple[Option[Any], ...]] = ()
    names_path: ClassVar[bool] = False

    def __init__(self, spec: str, environ: Mapping[str, str] | None = None) -> None:
        """Build the provider for what follows ``<prefix>:`` (each provider defines it).

        Args:
            spec: what follows the prefix; checked with ``parse_spec``.
            environ: the worker's environment (``Settings.environ``).
        """
        raise NotImplementedError

    @classmethod
    def usage(cls) -> str:
        """The spec's form: ``openai:<model>``."""
        return f"{cls.prefix}:{cls.model_part}"

    @classmethod
    def parse_spec(cls, rest: str) -> ParsedSpec:
        """Check what follows ``<prefix>:``; no I/O.

        Raises:
            ModelSpecError: no model (or path), an unknown option, or a value it does not take.
        """
        if cls.names_path:
            if not rest:
                raise ModelSpecError(f"{cls.prefix} model spec needs a file: {cls.usage()}")
            return ParsedSpec(rest)
        name, _, query = rest.partition("?")
        if not name:
            raise ModelSpecError(f"{cls.prefix} model spec needs a model: {cls.usage()}")
        known = {option.name: option for option in cls.options}
        values: dict[str, object] = {}
        for key, text in urllib.parse.parse_qsl(query, keep_blank_values=True):
            option = known.get(key)
            if option is None:
                takes = ", ".join(o.name for o in cls.options) or "none"
                raise ModelSpecError(f"{cls.prefix} has no option {key!r}; its options: {takes}")
            try:
                values[key] = option.read(text)
            except ValueError:
                raise ModelSpecError(
                    f"option {key} of {cls.prefix} takes {option.takes}, got {text!r}"
                ) from None
        return ParsedSpec(name, values)

    @classmethod
    def preflight(cls, parsed: ParsedSpec) -> None:
        """Check, where this process runs the worker, what the worker would find missing.

        Raises:
            ModelError: naming what is missing and how to fix it.
        """
