"""README's quickstart stays true: CI runs its test command, and its demo command works."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sysconfig
import time
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


def on_a_terminal(command: str, env: dict[str, str], answers: dict[str, str]) -> tuple[int, str]:
    """Run a shell command with a pseudo-terminal as its stdin, stdout and stderr.

    Args:
        command: the shell command.
        env: its environment.
        answers: prompt text -> what a person types when it appears.
    """
    master, slave = os.openpty()
    proc = subprocess.Popen(
        command, shell=True, cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    output, pending = "", dict(answers)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk.decode(errors="replace")
        for prompt in [p for p in pending if p in output]:
            os.write(master, pending.pop(prompt).encode())
        if proc.poll() is not None and not ready:
            break
    os.close(master)
    return proc.wait(timeout=30), output


def test_readme_demo_command_runs_on_embedded_defaults(tmp_path: Path) -> None:
    install, _, run = quickstart("demo").partition(" && ")
    assert install.startswith("python3 -m pip install -e .")
    env = user_env(tmp_path / "home")
    code, output = on_a_terminal(run, env, {"approve? [y/N] ": "y\n"})
    assert code == 0, output
    assert "model call 1 -> tool_use" in output  # progress, as it happens
    assert "delete_file" in output and "Done: hello.txt" in output
    workspace = tmp_path / "home" / "workspace"
    assert (workspace / "hello.txt").read_text() == "Hello from a durable Keel agent.\n"
    assert not (workspace / "draft.txt").exists()  # approved, so deleted
    assert (tmp_path / "home" / "temporal.db").exists()


def test_readme_demo_without_a_terminal_waits_for_approval(tmp_path: Path) -> None:
    _, _, run = quickstart("demo").partition(" && ")
    env = user_env(tmp_path / "home")
    done = subprocess.run(
        run,
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 3, done.stderr
    assert "keel approve" in done.stdout
    assert (tmp_path / "home" / "workspace" / "draft.txt").exists()


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
