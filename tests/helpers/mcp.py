"""MCP servers for tests: the stdio ones from PyPI, our hostile one, server-everything over HTTP."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from keel.activities.mcp import McpServerConfig, parse_mcp_spec

NPM_CACHE = Path(os.environ.get("KEEL_TEST_NPM_CACHE", Path.home() / ".cache" / "keel-test-npm"))
EVERYTHING = "@modelcontextprotocol/server-everything"
# written into NPM_CACHE once npm installed EVERYTHING and all it needs
INSTALLED = ".everything-installed"


def time_server(name: str = "time", **options: object) -> McpServerConfig:
    """mcp-server-time (PyPI), over stdio."""
    if shutil.which("mcp-server-time") is None:
        pytest.skip("mcp-server-time is not installed (pip install keel[dev])")
    config = parse_mcp_spec(f"{name}=mcp-server-time --local-timezone UTC")
    return McpServerConfig(name=config.name, command=config.command, **options)  # type: ignore[arg-type]


def git_server(repo: Path, name: str = "git") -> McpServerConfig:
    """mcp-server-git (PyPI), over stdio, on ``repo``."""
    if shutil.which("mcp-server-git") is None:
        pytest.skip("mcp-server-git is not installed (pip install keel[dev])")
    return parse_mcp_spec(f"{name}=mcp-server-git --repository '{repo}'")


def hostile_server(name: str = "hostile", log: Path | None = None) -> McpServerConfig:
    """Our own misbehaving server (tests/mcp_servers/hostile.py), over stdio."""
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if log is not None:
        env["KEEL_TEST_MCP_LOG"] = str(log)
    return McpServerConfig(
        name=name, command=(sys.executable, "-m", "tests.mcp_servers.hostile"), env=env
    )


def children_running(marker: str) -> list[int]:
    """Pids of this process's live children whose command line mentions ``marker``."""
    found = []
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] != "Z" and fields[1] == me and marker in cmdline:
            found.append(int(entry.name))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def everything_entry() -> Path:
    """server-everything's entry point, installed into a cache dir with npm when missing.

    One install at a time (the suite's processes share the cache dir: two ``npm install``
    into one prefix, or a test starting the server while another's install still writes its
    dependencies, left a tree without ``dunder-proto/get.js``), and an install counts only
    once npm said it succeeded (``INSTALLED``): a tree without that mark is installed again,
    from scratch.
    """
    entry = NPM_CACHE / "node_modules" / EVERYTHING / "dist" / "index.js"
    installed = NPM_CACHE / INSTALLED
    if installed.exists() and entry.exists():
        return entry
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed for server-everything")
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    with (NPM_CACHE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if installed.exists() and entry.exists():
            return entry  # another process installed it while this one waited
        shutil.rmtree(NPM_CACHE / "node_modules", ignore_errors=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(NPM_CACHE), EVERYTHING],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0 or not entry.exists():
            pytest.skip(
                f"npm could not install {EVERYTHING} (registry unreachable?): {done.stderr[-500:]}"
            )
        installed.write_text(EVERYTHING + "\n")
    return entry


class Everything:
    """server-everything in streamable HTTP mode on a loopback port, which can be restarted."""

    def __init__(self) -> None:
        self.entry = everything_entry()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return _listening(self.entry, self.port)

    def restart(self) -> None:
        """Kill the server and start a new one on the same port (it forgets every session)."""
        self.stop()
        self.proc = self._start()

    def stop(self) -> None:
        _stop(self.proc)


@contextmanager
def everything_http() -> Iterator[str]:
    """server-everything in streamable HTTP mode on a free loopback port; yields its URL."""
    proc = _listening(everything_entry(), port := free_port())
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        _stop(proc)


def _listening(entry: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        ["node", str(entry), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            assert time.monotonic() < deadline, "server-everything did not listen"
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
