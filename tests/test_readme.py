"""README's quickstart stays true: CI runs its test command, and its demo command works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def user_env(home: Path) -> dict[str, str]:
    """A user's shell: no Keel or Temporal settings, ``keel`` on PATH, a private KEEL_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEL_"))}
    env["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), env.get("PATH", "")])
    env["KEEL_HOME"] = str(home)
    return env


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
    env = user_env(tmp_path / "home")
    done = subprocess.run(
        run, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "hello.txt" in done.stdout
    written = tmp_path / "home" / "workspace" / "hello.txt"
    assert written.read_text() == "Hello from a durable Keel agent.\n"
    assert (tmp_path / "home" / "temporal.db").exists()


def test_readme_approval_example_runs(tmp_path: Path) -> None:
    match = re.search(r"^(keel run --session tidy .+)$", README, re.M)
    assert match, "README lost its approval example"
    env = user_env(tmp_path / "home")

    def sh(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    waiting = sh(match.group(1))
    assert waiting.returncode == 3, waiting.stderr
    assert "keel approve tidy" in waiting.stdout
    assert (tmp_path / "home" / "workspace" / "scratch.txt").exists()
    pending = sh("keel pending tidy --json")
    interrupt_id = json.loads(pending.stdout)["interrupts"][0]["id"]
    assert interrupt_id in waiting.stdout
    approved = sh(f"keel approve tidy {interrupt_id}")
    assert approved.returncode == 0, approved.stderr
    assert "workspace is tidy" in approved.stdout
    assert not (tmp_path / "home" / "workspace" / "scratch.txt").exists()
