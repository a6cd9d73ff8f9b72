"""The worker's price table: what each model's calls cost, for the fleet's models.

``KEEL_PRICES`` (or ``keel worker --prices``) names a TOML file whose ``[prices]`` table maps
a model spec, or a pattern of them, to its price in US dollars per million tokens::

    [prices]
    "bedrock:anthropic.claude-3-5-sonnet*" = { input = 3, output = 15 }
    "bedrock:anthropic.claude-3-haiku*" = { input = 0.25, output = 1.25 }
    "openai:*" = { input = 0, output = 0 }   # the fleet's local models

A key is matched against a session's model spec without its options (``?stream=false``...):
an exact key wins, else the longest pattern that matches (``*`` any text, ``?`` one
character, ``[abc]`` one of them: ``fnmatch``). A session's own price
(``SessionConfig.price``: ``keel run --price``, an agent file's ``price``) wins over the
table. The model activity prices each call with it (``keel.workflows.cost``).
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from keel.workflows.budget_contracts import ModelPrice

# The most a price file may take.
MAX_PRICE_FILE_BYTES = 1_000_000
_PATTERN_CHARS = frozenset("*?[")


class PriceTableError(ValueError):
    """A price file or table is invalid; the message names the key and what is wrong."""


class PriceTable:
    """Prices by model spec or pattern (see the module's docstring)."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        """Hold ``prices``: model specs and patterns, each to its price."""
        self.exact = {k: v for k, v in (prices or {}).items() if not _PATTERN_CHARS & set(k)}
        # longest first: the most specific pattern that matches wins
        self.patterns = sorted(
            ((k, v) for k, v in (prices or {}).items() if _PATTERN_CHARS & set(k)),
            key=lambda item: (-len(item[0]), item[0]),
        )

    def __len__(self) -> int:
        """How many prices: exact model names and patterns."""
        return len(self.exact) + len(self.patterns)

    def price(self, spec: str) -> ModelPrice | None:
        """The price of a model spec's calls; None when the table has none for it."""
        base = spec.partition("?")[0]
        for key in (spec, base):
            if key in self.exact:
                return self.exact[key]
        for pattern, price in self.patterns:
            if fnmatch.fnmatchcase(base, pattern) or fnmatch.fnmatchcase(spec, pattern):
                return price
        return None

    @classmethod
    def of(cls, raw: Any, where: str = "prices") -> PriceTable:
        """A table from its TOML value (a ``[prices]`` table), checked.

        Raises:
            PriceTableError: not a table of ``{input = N, output = N}`` tables, naming the key.
        """
        if not isinstance(raw, Mapping):
            raise PriceTableError(f"{where}: a table of model spec = {{input = N, output = N}}")
        prices: dict[str, ModelPrice] = {}
        for key, value in raw.items():
            if not key.strip():
                raise PriceTableError(f"{where}: an empty model spec")
            try:
                prices[key] = ModelPrice.model_validate(value)
            except ValidationError as err:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
                    for e in err.errors()
                )
                raise PriceTableError(
                    f"{where}.{key!r}: {problems} (expected {{input = N, output = N}}, US "
                    "dollars per million tokens)"
                ) from None
        return cls(prices)

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        """The ``[prices]`` table of a TOML file.

        Raises:
            PriceTableError: the file cannot be read, is not TOML, has no ``[prices]`` table,
                or a price is invalid; naming the file and the key.
        """
        file = Path(path)
        try:
            with file.open("rb") as opened:
                data = opened.read(MAX_PRICE_FILE_BYTES + 1)
        except OSError as err:
            raise PriceTableError(f"{file}: cannot read: {err.strerror or err}") from None
        if len(data) > MAX_PRICE_FILE_BYTES:
            raise PriceTableError(f"{file}: over the limit of {MAX_PRICE_FILE_BYTES:,} bytes")
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise PriceTableError(f"{file}: not valid TOML: {err}") from None
        if "prices" not in raw:
            raise PriceTableError(f"{file}: no [prices] table")
        try:
            return cls.of(raw["prices"])
        except PriceTableError as err:
            raise PriceTableError(f"{file}: {err}") from None
