"""Path-aware tests (issue 39): a test on a string is not fooled by ``..`` or control characters.

``path startswith "docs/"`` used to cover ``docs/../secret.txt``. Now a string with a ``..``
segment or an unsafe character passes no test that does not name them, ``under`` compares
normalised POSIX paths, and ``may_match`` (for deny and escalate criteria) counts doubt as a
match.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from keel import Interrupt, KeelClient
from keel.workflows.contracts import Condition
from keel.workflows.standing import describe, matches, may_match, parse_conditions
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use

DOCS = parse_conditions('path startswith "docs/"')
UNDER = parse_conditions('path under "docs/"')


def covered(tests: list[Condition], path: str) -> bool:
    return matches(tests, {"path": path})


@pytest.mark.parametrize(
    "path",
    [
        "docs/../secret.txt",
        "docs/\u0000/../../etc/x",
        "docs/a\nb",
        "docs/a\rb",
        "docs/..",
        "docs\\..\\secret.txt",  # backslashes separate segments too
        "docs/a\u2028b",  # Unicode line separator
        "docs/a\u202eb",  # bidirectional override
        "docs/a\u200bb",  # zero-width space
        "docs/a\x7fb",  # DEL
        "docs/a\x85b",  # C1 (next line)
        "docs/a\tb",
    ],
)
def test_a_string_test_never_covers_dotdot_or_control_characters(path: str) -> None:
    assert path.startswith("docs/") or path.startswith("docs\\")
    assert not covered(DOCS, path), path
    assert not covered(UNDER, path), path
    assert not covered(parse_conditions(f"path == {json.dumps(path[:-1])}"), path)
    assert not covered(parse_conditions('path != "x"'), path)
    # the reading that denies: in doubt, the test holds
    assert may_match(DOCS, {"path": path})
    # the plain reading, kept for histories recorded before the change, is fooled
    assert matches(DOCS, {"path": path}, strict=False) == path.startswith("docs/")


def test_a_test_that_names_them_covers_them() -> None:
    assert covered(parse_conditions('path == "docs/a\\nb"'), "docs/a\nb")
    assert covered(parse_conditions('path startswith "docs/../"'), "docs/../x")
    assert covered(parse_conditions('path in ["a/../b", "c"]'), "a/../b")
    # naming one does not name another
    assert not covered(parse_conditions('path startswith "docs/../"'), "docs/../x\x00")
    assert not covered(parse_conditions('path == "docs/a\\nb"'), "docs/a\nb/../c")
    # ordinary strings are as before
    assert covered(DOCS, "docs/a.md") and covered(DOCS, "docs/...md") and covered(DOCS, "docs/a..b")
    assert not covered(DOCS, "src/a.md")
    assert not may_match(DOCS, {"path": "src/a.md"})


@pytest.mark.parametrize(
    ("root", "path", "expected"),
    [
        ("docs/", "docs/a.md", True),
        ("docs/", "docs", True),  # the folder itself
        ("docs", "docs/a/b/c.md", True),
        ("docs/", "./docs//a/./b.md", True),
        ("docs/", "docs-other/a.md", False),
        ("docs/", "docsx", False),
        ("docs/", "/docs/a.md", False),  # absolute against relative
        ("/srv/data", "/srv/data/x", True),
        ("/srv/data", "srv/data/x", False),
        ("/srv/data", "/srv/database", False),
        ("/srv/data", "//srv/data/x", True),
        ("docs/", "docs/a/../b.md", False),  # a symlink makes a/.. somewhere else
        ("docs/", "docs/../docs/a.md", False),
        ("docs/", "docs\\a.md", False),  # a backslash: refused
        ("docs/", "docs/a\x00.md", False),
        (".", "a/b", True),
        (".", "/a/b", False),
        (".", "../a", False),
    ],
)
def test_under_compares_normalised_posix_paths(root: str, path: str, expected: bool) -> None:
    tests = parse_conditions(f'path under "{root}"')
    assert covered(tests, path) is expected, (root, path)
    assert describe(tests) == f'path under "{root}"'


def test_under_takes_a_clean_path_and_strings_only() -> None:
    for bad in (
        'path under "../x"',
        'path under "a\\\\b"',
        "path under 5",
        'path under "a\\u0000"',
    ):
        with pytest.raises(ValueError, match="under must be a path"):
            parse_conditions(bad)
    assert not matches(UNDER, {"path": 5})
    assert not matches(UNDER, {"path": ["docs", "a"]})
    assert not matches(UNDER, {})


def sid() -> str:
    return f"pt-{uuid.uuid4().hex[:10]}"


async def asking(keel: KeelClient, session: str, count: int) -> list[Interrupt]:
    for _ in range(200):
        pending = (await keel.pending(session)).interrupts
        if len(pending) >= count:
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session}: {count} interrupts never waited")


@pytest.mark.parametrize("op", ["startswith", "under"])
async def test_a_standing_approval_on_docs_does_not_cover_an_escape(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, op: str
) -> None:
    """``--always-when 'value startswith "docs/"'``: ``docs/../secret.txt`` asks a person."""
    out = tmp_path / "out.txt"

    def call(use_id: str, value: str) -> dict[str, Any]:
        use = tool_use(use_id, "guarded_record", path=str(out), value=value)
        return respond(use, stop="tool_use")

    steps = [
        call("a", "docs/1"),
        call("b", "docs/2"),
        call("c", "docs/../secret.txt"),
        call("d", "docs/\u0000/../../etc/x"),
        call("e", "docs-other/3" if op == "under" else "docs/a\nb"),
        respond(text("done")),
    ]
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps))
        [first] = await asking(keel, session, 1)
        when = parse_conditions(f'value {op} "docs/"')
        await keel.decide(session, first.id, "approve", always=True, always_when=when)
        asked = []
        for _ in range(3):  # each escape asks a person; deny it
            [waiting] = await asking(keel, session, 1)
            asked.append(waiting.tool_use.input["value"])
            await keel.decide(session, waiting.id, "deny", reason="not covered")
            for _ in range(100):
                pending = (await keel.pending(session)).interrupts
                if not pending or pending[0].id != waiting.id:
                    break
                await asyncio.sleep(0.05)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
    assert done.status == "completed", done
    assert asked == ["docs/../secret.txt", "docs/\u0000/../../etc/x", steps_value(op)]
    assert out.read_text().splitlines() == ["docs/1", "docs/2"]


def steps_value(op: str) -> str:
    return "docs-other/3" if op == "under" else "docs/a\nb"
