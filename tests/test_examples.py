"""Every Python example of README.md and docs/*.md runs as written, or (a fragment) compiles.

A complete program is a ```python block right after an ``<!-- example:NAME -->`` comment; it
ends with ``asyncio.run(main())``. ``<!-- example:NAME serves -->`` marks one that serves
until Ctrl-C (a worker): the test runs a session on it, then interrupts it, and it must exit
0 without a traceback. Each runs as its own process, from the repository's root
(its scripted model files are paths from there, as in README's quickstart), against the
tests' Temporal dev server (``TEMPORAL_ADDRESS``), with a fresh ``KEEL_HOME``; it starts the
worker it needs itself, and must exit 0. Every other ```python block is a fragment (a tool's
declaration, a policy): it must compile, and one without ``await`` must run too, in a process
of its own (its imports resolve, its decorators accept it).
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, SessionConfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?:^<!-- example:(?P<name>[\w-]+)(?P<serves> serves)? -->\n)?^```python\n(?P<code>.*?)^```",
    re.M | re.S,
)


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    name: str | None
    code: str
    serves: bool = False

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}" + (f":{self.name}" if self.name else "")


def examples() -> list[Example]:
    """Every ```python block of the pages, in order."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            name, code = match.group("name"), match.group("code")
            found.append(Example(page, line, name, code, serves=bool(match.group("serves"))))
    return found


PROGRAMS = [e for e in examples() if e.name and not e.serves]
SERVERS = [e for e in examples() if e.serves]
FRAGMENTS = [e for e in examples() if not e.name]


def test_the_pages_have_programs_and_each_program_is_marked() -> None:
    assert {e.page.name for e in PROGRAMS} >= {"README.md", "python-api.md"} and SERVERS
    names = [e.name for e in PROGRAMS + SERVERS]
    assert len(names) == len(set(names)), names
    for example in examples():
        complete = "asyncio.run(main())" in example.code
        assert complete == (example.name is not None), (
            f"{example.id}: a complete program (asyncio.run(main())) has an "
            "<!-- example:NAME --> line before it, and only one does"
        )
    marks = sum(len(re.findall(r"<!-- example:", page.read_text())) for page in PAGES)
    assert marks == len(names)  # no marker stands before anything but a python block


def test_python_api_examples_import_only_the_public_face() -> None:
    for example in (e for e in PROGRAMS + SERVERS if e.page.name == "python-api.md"):
        for line in example.code.splitlines():
            if re.match(r"(from|import) keel\b", line):
                assert re.match(r"from keel import ", line), f"{example.id}: {line}"


def user_env(temporal_env: WorkflowEnvironment, home: Path) -> dict[str, str]:
    """A user's environment: Keel installed, TEMPORAL_ADDRESS the tests' server, a KEEL_HOME."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "KEEL_")) and k != "PYTHONPATH"
    }
    env["TEMPORAL_ADDRESS"] = temporal_env.client.service_client.config.target_host
    env["KEEL_HOME"] = str(home)
    return env


@pytest.mark.parametrize("example", PROGRAMS, ids=lambda e: e.id)
def test_the_program_runs_as_written(
    example: Example, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    program = tmp_path / f"{example.name}.py"
    program.write_text(example.code)
    env = user_env(temporal_env, tmp_path / "home")
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{example.id}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    # each prints what it did; a turn that did not complete says "failed" or "awaiting_human"
    assert done.stdout.strip(), f"{example.id} printed nothing"
    assert not re.search(r"\b(failed|awaiting_human)\b", done.stdout), done.stdout


@pytest.mark.parametrize("example", SERVERS, ids=lambda e: e.id)
async def test_the_worker_program_serves_a_session_until_interrupted(
    example: Example, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    program = tmp_path / f"{example.name}.py"
    program.write_text(example.code)
    served = subprocess.Popen(
        [sys.executable, str(program)],
        cwd=ROOT,
        env=user_env(temporal_env, tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert served.stdout is not None
        ready, _, _ = await asyncio.to_thread(select.select, [served.stdout], [], [], 60)
        assert ready, "the program printed nothing within 60 s"
        said = served.stdout.readline()
        assert said.strip(), served.communicate()
        keel = KeelClient(temporal_env.client, task_queue="keel")
        config = SessionConfig(
            model="scripted:activities/examples/hello.json",
            tool_modules=["keel.activities.examples.workspace"],
        )
        session = f"served-{uuid.uuid4().hex[:8]}"
        record = await keel.run(session, "Write hello.txt", config=config, timeout_s=60)
        assert record.status == "completed", record
        assert (tmp_path / "home" / "workspace" / "hello.txt").exists()
    finally:
        served.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = served.communicate(timeout=60)
    assert served.returncode == 0, f"{example.id}\n{out}\n{err}"
    assert "Traceback" not in err, err


@pytest.mark.parametrize("example", FRAGMENTS, ids=lambda e: e.id)
def test_the_fragment_compiles_and_without_await_runs(example: Example, tmp_path: Path) -> None:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    compile(example.code, example.id, "exec", flags=flags)  # a SyntaxError fails the test
    try:
        compile(example.code, example.id, "exec")
    except SyntaxError:
        return  # it awaits: the body of an async function, shown alone
    fragment = tmp_path / "fragment.py"
    fragment.write_text(example.code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(fragment)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{example.id}\n{done.stderr}"
