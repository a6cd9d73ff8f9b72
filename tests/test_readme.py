"""README's quickstart stays true: CI runs its test command, and its demo command works."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def quickstart(name: str) -> str:
    match = re.search(rf"<!-- quickstart:{name} -->\s*```sh\n(.+?)\n```", README, re.S)
    assert match, f"README lost its quickstart:{name} command"
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for part in quickstart("tests").split(" && "):
        assert part in ci, f"CI does not run {part!r} from README"


def test_readme_demo_command_runs_on_embedded_defaults(tmp_path: Path) -> None:
    install, _, run = quickstart("demo").partition(" && ")
    assert install.startswith("python3 -m pip install -e .")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["KEEL_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        run, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "hello.txt" in done.stdout
    written = tmp_path / "home" / "workspace" / "hello.txt"
    assert written.read_text() == "Hello from a durable Keel agent.\n"
    assert (tmp_path / "home" / "temporal.db").exists()
