"""The cases of ``keel eval``: where each comes from, and how its replay went (``CaseRun``).

``case_sources`` sorts ``keel eval``'s arguments into case files and session ids;
``read_case`` reads a case file, refusing one that is not a case (exit 2, naming the file
and the field) before anything runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keel.worker.client.expectations import ExpectationCheck
    from keel.worker.client.replays import ReplayCase, ReplayReport

# The most a case file may take.
MAX_CASE_BYTES = 20_000_000


@dataclass
class CaseRun:
    """One case of ``keel eval``: where it came from, and how its replay went.

    Attributes:
        case: the case.
        file: the file it was read from, or None for a session id.
        label: how the table and JUnit name it (its name; with its file when two share one).
        report: the replay's report, once it ran (None: it could not run, see ``error``).
        error: why the replay could not run or finish (a turn that timed out, say).
        checks: its expectations, checked (empty when the replay did not reach its end).
        seconds: the replay's wall time.
    """

    case: ReplayCase
    file: str | None
    label: str = ""
    report: ReplayReport | None = None
    error: str | None = None
    checks: list[ExpectationCheck] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Whether the replay reached the recording's last turn without diverging or stopping."""
        report = self.report
        if report is None or report.diverged or report.stopped:
            return False
        return len(report.turns) == len(self.case.turns)

    @property
    def failures(self) -> list[str]:
        """Why the case failed, one line each; empty when it passed."""
        from keel.worker.cli.replaying import divergence_text

        found = []
        if self.error is not None:
            found.append(self.error)
        report = self.report
        if report is not None and report.divergence is not None:
            found.append(divergence_text(report))
        elif report is not None and report.stopped:
            found.append(f"STOPPED: {report.stopped}")
        found += [f"expected: {c.check}; {c.detail}" for c in self.checks if not c.met]
        return found

    @property
    def passed(self) -> bool:
        """Whether the case passed."""
        return self.complete and not self.failures


def case_sources(values: list[str]) -> tuple[list[str], list[str]]:
    """The case files and session ids of ``keel eval``'s arguments.

    A folder stands for the ``*.json`` files in it, in name order.

    Raises:
        UsageError: an argument that is no file, folder or session id; an empty folder.
    """
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.paths import local_path
    from keel.worker.shell import session_id_problem

    files: list[str] = []
    sessions: list[str] = []
    for value in values:
        path = local_path(value)
        if path.is_dir():
            found = sorted(str(p) for p in path.glob("*.json") if p.is_file())
            if not found:
                raise UsageError(f"{value}: a folder with no case file (*.json) in it")
            files += found
        elif path.exists():
            files.append(value)
        elif value.endswith(".json") or session_id_problem(value) is not None:
            raise UsageError(f"{value}: no such case file (nor a session id)")
        else:
            sessions.append(value)
    return files, sessions


def read_case(path: str) -> ReplayCase:
    """A case file, checked: exit 2 naming the file and the field when it is not a case.

    Raises:
        UsageError: unreadable, not JSON, not a case (no ``keel_case``, a field missing or
            wrong), or an ``expect`` block that cannot be checked.
    """
    from pydantic import ValidationError

    from keel.worker.cli.run_inputs import UsageError, read_text_file, validation_summary
    from keel.worker.client.expectations import expectation_problems
    from keel.worker.client.replays import ReplayCase

    text = read_text_file("case", path, MAX_CASE_BYTES)
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON: {err}") from err
    if not isinstance(raw, dict) or "keel_case" not in raw:
        raise UsageError(
            f"{path}: not a Keel case: it has no keel_case field (write one with keel export)"
        )
    try:
        case = ReplayCase.model_validate(raw)
    except ValidationError as err:
        raise UsageError(f"{path}: not a Keel case: {validation_summary(err)}") from err
    problems = expectation_problems(case.expect) if case.expect is not None else []
    if problems:
        raise UsageError(f"{path}: {'; '.join(problems)}")
    return case


def label_runs(runs: list[CaseRun]) -> None:
    """Name each case by its name; with its file (or session) when two share a name."""
    names = [run.case.name for run in runs]
    for run in runs:
        shared = names.count(run.case.name) > 1
        run.label = f"{run.case.name} ({run.file or 'session'})" if shared else run.case.name
