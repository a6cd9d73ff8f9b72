"""The example tools declare what running them again does, as the docs say they do."""

from __future__ import annotations

from pathlib import Path

import keel.activities.examples.workspace as workspace
from keel.activities.tools import get_tool

ROOT = Path(__file__).resolve().parents[2]


def test_the_workspace_tools_declare_their_effects() -> None:
    declared = {}
    for name in workspace.__all__:
        registered = get_tool(name)
        assert registered is not None and registered.fn is getattr(workspace, name)
        declared[name] = registered.spec.effect
    assert declared == {
        "list_files": "read",
        "read_file": "read",
        "write_file": "write",
        "delete_file": "write",
    }
    source = Path(workspace.__file__).read_text()
    assert source.count("@tool(effect=") == 4  # each says so, the default (write) too


def test_the_readme_and_the_tools_page_show_the_declarations() -> None:
    readme = (ROOT / "README.md").read_text()
    assert '`@tool(effect="write", requires_approval=True)`' in readme
    tools = (ROOT / "docs" / "tools.md").read_text()
    assert '@tool(effect="read", timeout_s=60)' in tools
    assert '@tool(context=True, effect="idempotent")' in tools
