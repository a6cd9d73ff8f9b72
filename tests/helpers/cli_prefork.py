"""Run ``keel`` commands forked from a process that has already imported Keel.

A ``keel`` command spends about 2 s of CPU importing temporalio, pydantic and Keel before
it does anything; the CLI tests run hundreds of them on 2 cores. A prefork server imports
all of it once per test process, then forks a child per command, which sets the command's
arguments, environment, folder and standard streams and runs the same ``main()`` that the
``keel`` script runs. The child is a fresh process in every way a command can observe
(its own pid, environment, streams and exit code); what it skips is the import. It also
proves a rule the code keeps: nothing reads the environment at import time (the server
imported Keel under another environment).

The server forks twice per command: a waiter, which reports the command's pid and then its
exit status on the connection, and the command itself. The server never starts a thread, so
forking it is safe; it refuses to serve if an import did start one.

``python3 -m tests.helpers.cli_prefork SOCKET`` runs the server (``PreforkServer()`` starts
it); ``PreforkServer.run`` runs one command through it to its end, ``PreforkServer.popen``
starts one (a ``ForkedProcess``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pkgutil
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from importlib import import_module
from pathlib import Path
from typing import Any

# Environment variables that Python reads as it starts: a command whose environment sets
# them otherwise than the server's runs as a real process instead.
_STARTUP_VARS = ("LANG", "LC_ALL", "LC_CTYPE")
_HEADER = struct.Struct("!I")
# How long a killed command's streams are read on, as subprocess.run does after a timeout.
_AFTER_KILL_S = 5.0


def _preload() -> None:
    """Import what ``keel`` commands import: the CLI's modules and what they import."""
    import keel.worker.cli as cli

    import_module("keel.worker.cli.main")
    for module in pkgutil.iter_modules(cli.__path__, prefix="keel.worker.cli."):
        if module.name != "keel.worker.cli.__main__":
            import_module(module.name)


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in _STARTUP_VARS}


def _text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True)`` gives them: UTF-8, universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the connection closed mid-request")
        data += chunk
    return data


def _command(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked command process: become the command, run ``main()``; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["argv0"], *request["args"]]
        from keel.worker.cli.main import main

        main()  # exits with os._exit once output is flushed
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - a crash is reported as a process's would be
        traceback.print_exc()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _waiter(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked waiter: fork the command, report its pid, then its status; never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server's SIG_IGN would reap it
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def serve(path: str) -> None:
    """Import Keel, then fork a command per connection on the Unix socket ``path``."""
    _preload()
    if threading.active_count() != 1:
        raise SystemExit(f"prefork: importing Keel started {threading.active_count()} threads")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        fds: list[int] = []
        try:
            head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
            if len(head) < _HEADER.size:
                head += _read_exactly(conn, _HEADER.size - len(head))
            (size,) = _HEADER.unpack(head)
            request = json.loads(_read_exactly(conn, size))
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                listener.close()
                _waiter(conn, request, fds)
        except Exception:  # noqa: BLE001 - one bad request never stops the server
            traceback.print_exc()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            conn.close()


class PreforkServer:
    """A prefork server of this test process; ``run`` a command through it."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        """Start the server from ``root`` with the environment ``env`` at startup."""
        self._dir = tempfile.mkdtemp(prefix="keel-prefork-")
        self.path = os.path.join(self._dir, "socket")
        self.root = root
        self.startup = _startup_env(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.cli_prefork", self.path],
            env=env,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready != "ready\n":
            self.proc.kill()
            raise RuntimeError(f"the prefork server did not start (said {ready!r})")

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a command with ``env`` runs as it would in a process of its own."""
        return self.proc.poll() is None and _startup_env(env) == self.startup

    def close(self) -> None:
        """Stop the server (commands it forked run on to their end)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self._dir)

    def request(self, args: list[str], env: dict[str, str], cwd: Path) -> bytes:
        """What asks the server to run ``keel ARGS`` in ``cwd`` with ``env``."""
        argv0 = str(self.root / "keel" / "worker" / "cli" / "__main__.py")
        body = json.dumps({"args": args, "env": env, "cwd": str(cwd), "argv0": argv0})
        return _HEADER.pack(len(body.encode())) + body.encode()

    def popen(
        self, args: list[str], env: dict[str, str], cwd: Path, **streams: Any
    ) -> ForkedProcess:
        """Start ``keel ARGS`` forked; as ``subprocess.Popen(..., text=True)``."""
        return ForkedProcess(self, args, env, cwd, **streams)

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run ``keel ARGS`` forked; as ``subprocess.run(..., capture_output=True, text=True)``."""
        proc = self.popen(args, env, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # what it started may hold
                proc.communicate(_AFTER_KILL_S)  # its streams open: read on a while, no more
            out, err = proc.read_so_far()
            raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
        assert proc.returncode is not None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out or "", err or "")


class ForkedProcess:
    """A command forked by a prefork server, used as a ``subprocess.Popen(text=True)`` is.

    ``pid`` is the command's own; its exit status comes from the server's waiter (the
    command is not this process's child). ``stdin``, ``stdout`` and ``stderr`` are text
    files when asked for with ``subprocess.PIPE``.
    """

    def __init__(
        self,
        server: PreforkServer,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        *,
        stdin: Any = subprocess.DEVNULL,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = subprocess.DEVNULL,
    ) -> None:
        """Start ``keel ARGS``; each stream is DEVNULL, PIPE, a file or a descriptor."""
        self.args = [sys.executable, "-m", "keel.worker.cli", *args]
        self.returncode: int | None = None
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        theirs: list[int] = []
        to_close: list[int] = []
        for name, given in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
            reading = name == "stdin"
            if given == subprocess.PIPE:
                r, w = os.pipe()
                mine, fd = (w, r) if reading else (r, w)
                setattr(self, name, open(mine, "w" if reading else "r", encoding="utf-8"))
            elif given in (None, subprocess.DEVNULL):
                fd = os.open(os.devnull, os.O_RDONLY if reading else os.O_WRONLY)
            else:
                fd = os.dup(given if isinstance(given, int) else given.fileno())
            theirs.append(fd)
            to_close.append(fd)
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(server.path)
            socket.send_fds(self._conn, [server.request(args, env, cwd)], theirs)
        finally:
            for fd in to_close:
                os.close(fd)
        self._read = {"stdout": b"", "stderr": b""}  # what communicate has read
        self._report = b""
        while b"\n" not in self._report:
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(f"the prefork server did not start {args!r}")
            self._report += chunk
        head, self._report = self._report.split(b"\n", 1)
        self.pid = int(head)

    def _read_status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        while b"\n" not in self._report:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return None
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(f"the prefork server lost {self.args!r}")
            self._report += chunk
        self.returncode = int(self._report.split(b"\n", 1)[0])
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        """The exit code, or None while the command runs."""
        return self._read_status(0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command's end; ``subprocess.TimeoutExpired`` after ``timeout``."""
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        """Signal the command, unless it has ended."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Read stdout and stderr to their end together, then wait; as ``Popen.communicate``.

        After ``timeout``, ``subprocess.TimeoutExpired``; what was read is kept for the next
        call (and ``read_so_far``), and the command runs on.
        """
        if self.stdin is not None and not self.stdin.closed:
            self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)):
                if stream is not None and not stream.closed:
                    sel.register(stream.fileno(), selectors.EVENT_READ, name)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        self._read[key.data] += chunk
                    else:
                        sel.unregister(key.fd)
                        getattr(self, key.data).close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
        return self.read_so_far()

    def read_so_far(self) -> tuple[str | None, str | None]:
        """What ``communicate`` has read of stdout and stderr (None: not a pipe)."""
        return (
            _text(self._read["stdout"]) if self.stdout is not None else None,
            _text(self._read["stderr"]) if self.stderr is not None else None,
        )

    def __enter__(self) -> ForkedProcess:
        """The process itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the pipes and wait, as ``Popen`` does."""
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


if __name__ == "__main__":
    serve(sys.argv[1])
