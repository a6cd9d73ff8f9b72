"""Keel's workflow sandbox: temporalio's, entered less expensively.

temporalio's sandbox enters a workflow run by ``exec`` of a short code string: once per
activation, and once per payload the SDK's payload visitor meets (to ask the run for the
payload's serialization context), on the way in and on the way out, several passes each.
``exec`` of a string compiles it every time, about 16 µs each here, which was a tenth of a Keel
worker's CPU under load. ``CompiledSandboxRunner`` is the same sandbox, with the same
restrictions; it differs in two ways:

- each code string is compiled once per process, and the code object is run in the same
  globals;
- the payload visitor's question (which serialization or storage context a payload has) is
  asked of the run directly, not through the sandbox's importer: the answer is a lookup of the
  run's pending commands. Workflow code still only ever runs inside the sandbox.

The sandbox's instance class is private to temporalio (``workflow_sandbox._runner._Instance``).
If a temporalio release moves it, ``compiled_code_active`` says so and the worker uses the
stock sandbox; ``tests/worker/test_sandbox.py`` fails then, so the change is noticed, and
checks that the fallback works.

Worth it (issue 19): against the stock ``SandboxedWorkflowRunner`` with the same restrictions,
ratios Keel / floor, medians of 4 runs each, with and without it alternating, of
``python3 -m tests.benchmarks --repeats 5 --latency-cycles 10 --history-cycles 5 --sessions
--replay-cycles 100 --replay-repeats 5 --memory-sessions 50``: ``worker_cpu_per_cycle
[sessions=1]`` 1.08 against 1.34 (-19%; better in each of the 4 pairs), ``replay[cycles=100]``
0.50 against 0.97 (-49%; each pair). See docs/performance.md.
"""

from __future__ import annotations

import functools
import logging
from types import CodeType
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

logger = logging.getLogger(__name__)

try:
    from temporalio.worker.workflow_sandbox import _runner
except ImportError:  # pragma: no cover - a temporalio release without it
    _runner = None  # type: ignore[assignment]
# Typed as Any: a private class of temporalio, which may not be there.
_Instance: Any = getattr(_runner, "_Instance", None)

# The name under which the sandbox keeps its in-sandbox side of a run.
_IN_SANDBOX = "__temporal_in_sandbox"

# Modules shared with the sandbox instead of re-imported for every workflow run: pydantic, and
# all of ``keel.workflows`` (pure by rule: no I/O, clocks, randomness or environment reads, and no
# module-level state that changes). Passing ``keel.workflows.session`` through too saves importing
# it for each new run; its determinism is proven by replaying recorded histories in CI and by
# ``tests/workflows/test_purity.py`` rather than by the sandbox's import checks.
# Worth it (issue 19): against passing only pydantic and workflows' data modules through
# (``session`` and ``handlers`` imported again for every run), ``memory_per_cached_session``
# Keel / floor 1.28 and 1.28 against 1.86 and 1.81 (126 and 129 KB a session against 218 and
# 198), runs alternating, by ``python3 -m tests.benchmarks --repeats 1 --latency-cycles 2
# --history-cycles 5 --sessions --replay-cycles 5 --replay-repeats 1 --memory-sessions 200``.
# No other figure moved consistently by 5% (docs/performance.md).
# ``cryptography`` too, for ``keel.workflows.signing``'s Ed25519 check: its Rust extension module
# cannot be initialised a second time in a process (PyO3), so a sandbox re-import would fail,
# and verifying is a pure function (key, message, signature -> yes or no), nothing the
# sandbox's import checks are there for.
PASSTHROUGH_MODULES = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "keel.workflows",
    "cryptography",
)

# The sandbox runs a handful of distinct strings (enter a run, activate, get a payload's
# serialization context or storage context); a few more per workflow class.
_CODE_CACHE = 64


@functools.lru_cache(maxsize=_CODE_CACHE)
def compiled(code: str) -> CodeType:
    """``code`` compiled as ``exec`` of the string would compile it."""
    return compile(code, "<string>", "exec")


def compiled_code_active() -> bool:
    """Whether this temporalio has the sandbox instance whose code strings are cached."""
    return _Instance is not None and callable(getattr(_Instance, "_run_code", None))


if _Instance is not None:

    class _CompiledInstance(_Instance):  # type: ignore[misc]
        """temporalio's sandboxed run: code strings compiled once, context asked directly."""

        def _run_code(self, code: str, **extra_globals: Any) -> None:
            super()._run_code(compiled(code), **extra_globals)

        def get_serialization_context(self, command_info: Any) -> Any:
            """The run's answer, asked without entering the sandbox.

            The SDK asks for every payload of every activation. The answer only looks up the
            run's pending commands and builds a small dataclass: no import, nothing that the
            sandbox's restrictions are there for.
            """
            in_sandbox = self.globals_and_locals.get(_IN_SANDBOX)
            if in_sandbox is None:
                return super().get_serialization_context(command_info)
            return in_sandbox.get_serialization_context(command_info)

        def get_external_store_context(self, command_info: Any) -> Any:
            """The run's answer, asked without entering the sandbox (as above)."""
            in_sandbox = self.globals_and_locals.get(_IN_SANDBOX)
            if in_sandbox is None:
                return super().get_external_store_context(command_info)
            return in_sandbox.get_external_store_context(command_info)


class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """temporalio's ``SandboxedWorkflowRunner``, entered less expensively (see the module)."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        """A sandboxed run, as ``SandboxedWorkflowRunner`` makes it."""
        if not compiled_code_active():
            return super().create_instance(det)
        return _CompiledInstance(det, self.runner_class, self.restrictions)


def sandbox_runner() -> CompiledSandboxRunner:
    """The sandbox: default restrictions, Keel's ``PASSTHROUGH_MODULES`` shared by all runs."""
    if not compiled_code_active():
        logger.warning(
            "temporalio's sandbox instance class has moved: using the stock sandbox, which "
            "compiles its code strings on every activation and payload"
        )
    return CompiledSandboxRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )
