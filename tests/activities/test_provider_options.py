"""The options table in docs/models.md is the one the provider classes declare."""

from __future__ import annotations

from keel.activities.models import PROVIDER_CLASSES
from tests.helpers.cli import ROOT


def _default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def test_the_docs_options_table_matches_the_classes() -> None:
    docs = (ROOT / "docs" / "models.md").read_text()
    header = "| provider | option | takes | default | what it does |"
    lines = docs.split(header, 1)[1].strip().splitlines()[1:]  # past the |---| line
    table = [line for line in lines[: lines.index("")] if line.startswith("|")]
    declared = [
        f"| `{cls.prefix}:` | `{o.name}` | {o.takes} | {_default(o.default)} | {o.about} |"
        for cls in PROVIDER_CLASSES
        for o in cls.options
    ]
    assert table == declared
