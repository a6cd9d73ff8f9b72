"""README and docs/ stay true: short README, working links, a tour that runs, imports that exist."""

from __future__ import annotations

import os
import re
import resource
import shlex
import signal
import subprocess
import time
import unicodedata
from pathlib import Path

import pytest

from keel.worker.cli.main import build_parser
from tests.test_readme import README, ROOT, user_env

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "infra" / "README.md", *sorted(DOCS.glob("*.md"))]

# The tour blocks of README and the test that runs each one.
TOURS = {"approval", "watch", "crash", "models"}

FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, spaces to '-', no punctuation but '-', '_'.

    Args:
        heading: the heading's text, as written after the leading '#'s.
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(
        ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in ("L", "M", "N")
    )
    return kept.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown text, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", markdown).splitlines():
        match = re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(markdown: str, base: Path) -> list[str]:
    """The relative links of a Markdown text that lead nowhere.

    A link is broken when its file does not exist (relative to ``base``, the folder of the
    page), or when its ``#anchor`` names no heading of that file. External links (http, https,
    mailto) are not checked. Links inside code blocks and code spans are not links.

    Args:
        markdown: the page's text.
        base: the folder the page is in.
    """
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", markdown))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"(https?|mailto):", target):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path) if path else None
        if file is not None and not file.exists():
            broken.append(target)
            continue
        if anchor:
            page = markdown if file is None else file.read_text() if file.is_file() else ""
            if file is not None and file.suffix != ".md" or anchor not in anchors(page):
                broken.append(target)
    return broken


def test_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


def test_no_page_points_at_the_shared_folder() -> None:
    files = [ROOT / "README.md", *(p for p in DOCS.rglob("*") if p.is_file())]
    assert len(files) > 10
    for file in files:
        data = file.read_bytes()  # images too (docs/images)
        assert b"../shared" not in data, file
        assert b"shared/DESIGN.md" not in data, file


def test_slugs_follow_github() -> None:
    assert github_slug("Where `keel run` gets its Temporal") == "where-keel-run-gets-its-temporal"
    assert github_slug("S1: provenance") == "s1-provenance"
    assert github_slug("1. A Temporal to talk to") == "1-a-temporal-to-talk-to"
    assert github_slug("Approvals, questions, steering and budgets") == (
        "approvals-questions-steering-and-budgets"
    )
    assert github_slug("snake_case and S1–S6") == "snake_case-and-s1s6"
    assert anchors("# A\n## A\n```sh\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_link_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Real heading\n")
    page = (
        "# Top\n"
        "[ok](other.md) [ok](other.md#real-heading) [ok](#top) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad](other.md#no-such-heading) [bad](#nowhere)\n"
        "`[in code](missing-too.md)`\n"
        "```md\n[in a block](missing-three.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == ["missing.md", "other.md#no-such-heading", "#nowhere"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page.read_text(), page.parent) == []


def test_every_docs_page_is_linked_from_the_index() -> None:
    index = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"


# --- the tour -------------------------------------------------------------------------


def tour(name: str) -> list[str]:
    """The commands of README's ``<!-- tour:NAME -->`` block (comment lines left out)."""
    match = re.search(rf"<!-- tour:{name} -->\s*```sh\n(.+?)\n```", README, re.S)
    assert match, f"README lost its tour:{name} block"
    lines = [line.strip() for line in match.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_every_tour_block_has_a_test() -> None:
    assert set(re.findall(r"<!-- tour:(\w+) -->", README)) == TOURS


def sh(command: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one tour command as a user would in a script: a shell, no terminal."""
    return subprocess.run(
        command,
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_tour_approval_then_watch(tmp_path: Path) -> None:
    env = user_env(tmp_path / "home")
    workspace = tmp_path / "home" / "workspace"
    run, pending, approve = tour("approval")
    assert run.startswith("keel run --session tidy") and "<id>" in approve

    waiting = sh(run, env)
    assert waiting.returncode == 3, waiting.stderr
    assert "waiting for approval: tool 'delete_file' requires approval" in waiting.stdout
    interrupt_id = re.search(r"keel approve tidy (\S+)", waiting.stdout)
    assert interrupt_id, waiting.stdout
    assert (workspace / "scratch.txt").exists()

    listed = sh(pending, env)
    assert listed.returncode == 0, listed.stderr
    assert interrupt_id.group(1) in listed.stdout

    approved = sh(approve.replace("<id>", interrupt_id.group(1)), env)
    assert approved.returncode == 0, approved.stderr
    assert "The workspace is tidy" in approved.stdout
    assert not (workspace / "scratch.txt").exists()

    watch, show = tour("watch")
    watched = sh(watch, env)
    assert watched.returncode == 0, watched.stderr
    for event in ("model_called", "tool_finished", "interrupt_created", "interrupt_decided"):
        assert event in watched.stdout
    assert re.search(r"turn_ended +completed \(end_turn\)", watched.stdout), watched.stdout
    shown = sh(show, env)
    assert shown.returncode == 0, shown.stderr
    assert "assistant: The workspace is tidy" in shown.stdout
    assert "[turn 1 completed: 3 model calls" in shown.stdout


def no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_tour_crash_and_resume(tmp_path: Path) -> None:
    env = user_env(tmp_path / "home")
    calls = tmp_path / "model-calls.jsonl"
    env["KEEL_SCRIPTED_LOG"] = str(calls)  # every request the scripted model receives
    run, wait, show = tour("crash")
    assert run.startswith("keel run --session crash")

    first = subprocess.Popen(
        run,
        shell=True,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=no_core_dump,
    )
    deadline = time.monotonic() + 90
    while not calls.exists() or len(calls.read_text().splitlines()) < 2:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the turn never reached its slow model call"
        time.sleep(0.1)
    # The second model call is now in its 8 s: what Ctrl-\ does on a terminal.
    os.killpg(first.pid, signal.SIGQUIT)
    first.communicate(timeout=30)
    assert first.returncode in (-signal.SIGQUIT, 128 + signal.SIGQUIT), first.returncode
    hello = tmp_path / "home" / "workspace" / "hello.txt"
    assert hello.read_text() == "Hello from a Keel agent that survived a crash.\n"

    resumed = sh(wait, env)
    assert resumed.returncode == 0, resumed.stderr
    assert "turn 1 completed (end_turn)" in resumed.stderr, resumed.stderr
    assert "Done: hello.txt is written" in resumed.stdout, resumed.stdout
    assert len(calls.read_text().splitlines()) == 3  # the lost call was made again, once

    shown = sh(show, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("Done: hello.txt is written") == 1
    assert shown.stdout.count('"name": "write_file"') == 1
    assert shown.stdout.count("[toolResult]") == 1
    assert "[turn 1 completed: 2 model calls" in shown.stdout


def test_tour_models_are_commands_keel_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    from keel.activities.models import resolve_model

    commands = tour("models")
    providers = set()
    for command in commands:
        words = shlex.split(command)
        while re.match(r"[A-Z_]+=", words[0]):
            name, _, value = words.pop(0).partition("=")
            assert name in ("AWS_REGION", "OPENAI_BASE_URL", "OPENAI_API_KEY")
            monkeypatch.setenv(name, value)
        assert words[0] == "keel"
        args = build_parser().parse_args(words[1:])  # argparse exits on a flag keel lacks
        assert args.handler.__name__ == "cmd_run"
        resolve_model(args.model)  # raises on a spec no provider takes
        providers.add(args.model.partition(":")[0])
    assert providers == {"bedrock", "openai"}


# --- Python imports -------------------------------------------------------------------


def import_lines(page: Path) -> list[str]:
    """Every ``from X import a, b`` statement of a page's ```python blocks, one per line."""
    found = []
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
        block = re.sub(r"\(\s*([^)]*?)\s*\)", lambda m: " ".join(m.group(1).split()), block)
        found += [line for line in block.splitlines() if re.match(r"from \S+ import ", line)]
    return found


def import_params() -> list[object]:
    params: list[object] = []
    for page in PAGES:
        for line in import_lines(page):
            page_id = str(page.relative_to(ROOT))
            params.append(pytest.param(line, id=f"{page_id}: {line}"))
    return params


def test_the_python_api_page_has_imports() -> None:
    lines = import_lines(DOCS / "python-api.md")
    assert any(re.match(r"from keel import .*\bKeelClient\b.*\bconnect\b", ln) for ln in lines)
    # the public face only: everything a user of the Python API needs comes from keel
    public = r"from (keel|pathlib|asyncio|os|temporalio\.[a-z.]+) import|import (asyncio|os|uuid)$"
    assert all(re.match(public, ln) for ln in lines), lines


@pytest.mark.parametrize("line", import_params())
def test_docs_imports_are_true(line: str) -> None:
    exec(line, {})
