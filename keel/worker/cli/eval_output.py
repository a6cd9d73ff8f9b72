"""What ``keel eval`` prints and writes: the table, the JSON object, the JUnit XML.

Each case is a ``CaseRun`` (``keel.worker.cli.evaluation``): its replay's report, its
expectations checked, and why it failed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keel.worker.cli.eval_cases import CaseRun


def print_table(runs: Sequence[CaseRun], seconds: float, concurrency: int) -> None:
    """The table of ``keel eval``: one row per case, then why each failing case failed."""
    rows = [("CASE", "TURNS", "DIVERGED", "EXPECTATIONS", "SECONDS", "RESULT")]
    for run in runs:
        rows.append(
            (
                run.label,
                _turns(run),
                _diverged(run),
                _expectations(run),
                f"{run.seconds:.2f}",
                "ok" if run.passed else "FAIL",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    failed = [run for run in runs if not run.passed]
    if failed:
        print()
    for run in failed:
        for reason in run.failures or ["the replay did not reach the recording's last turn"]:
            print(f"FAIL {run.label}: {reason}")
    print(
        f"\n{len(runs)} case(s) in {seconds:.2f} s (concurrency {concurrency}): "
        f"{len(runs) - len(failed)} passed, {len(failed)} failed"
    )


def runs_json(
    runs: Sequence[CaseRun], model: str, seconds: float, concurrency: int
) -> dict[str, Any]:
    """``keel eval --json``: one object, each case's outcome in ``cases``."""
    failed = sum(1 for run in runs if not run.passed)
    return {
        "model": model,
        "cases": [case_json(run) for run in runs],
        "passed": len(runs) - failed,
        "failed": failed,
        "seconds": round(seconds, 3),
        "concurrency": concurrency,
    }


def case_json(run: CaseRun) -> dict[str, Any]:
    """One case of ``keel eval --json``."""
    report = run.report.as_json() if run.report is not None else None
    return {
        "case": run.label,
        "file": run.file,
        "session": run.case.session,
        "replay_session": report["replay_session"] if report else None,
        "turns": report["turns"] if report else 0,
        "recorded_turns": len(run.case.turns),
        "diverged": bool(report and report["diverged"]),
        "divergence": report["divergence"] if report else None,
        "stopped": report["stopped"] if report else None,
        "error": run.error,
        "expectations": [c.model_dump() for c in run.checks],
        "passed": run.passed,
        "failures": run.failures,
        "seconds": round(run.seconds, 3),
    }


def junit_xml(runs: Sequence[CaseRun], seconds: float) -> str:
    """JUnit XML: one ``testcase`` per case, a ``failure`` with why when it failed."""
    failed = [run for run in runs if not run.passed]
    suites = ET.Element("testsuites", tests=str(len(runs)), failures=str(len(failed)))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="keel eval",
        tests=str(len(runs)),
        failures=str(len(failed)),
        errors="0",
        time=f"{seconds:.3f}",
    )
    for run in runs:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"keel.eval.{run.file or 'session'}",
            name=run.label,
            time=f"{run.seconds:.3f}",
        )
        if not run.passed:
            reasons = run.failures or ["the replay did not reach the recording's last turn"]
            failure = ET.SubElement(case, "failure", message=reasons[0])
            failure.text = "\n".join(reasons)
        out = ET.SubElement(case, "system-out")
        out.text = _summary(run)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


def _summary(run: CaseRun) -> str:
    """What a JUnit testcase's output says: the replay session, turns, expectations."""
    report = run.report
    lines = [f"replay session: {report.replay_session if report else '(none)'}"]
    lines.append(f"turns replayed: {_turns(run)}; diverged: {_diverged(run)}")
    lines += [f"{'met' if c.met else 'UNMET'}: {c.check}" for c in run.checks]
    return "\n".join(lines)


def _turns(run: CaseRun) -> str:
    """``replayed/recorded`` turns."""
    replayed = len(run.report.turns) if run.report is not None else 0
    return f"{replayed}/{len(run.case.turns)}"


def _diverged(run: CaseRun) -> str:
    """``no``, ``turn N``, or ``-`` when the replay did not run."""
    if run.report is None:
        return "-"
    divergence = run.report.divergence
    return f"turn {divergence.turn}" if divergence is not None else "no"


def _expectations(run: CaseRun) -> str:
    """``3/3 met``, ``none``, or ``not checked`` when the replay did not reach its end."""
    expect = run.case.expect
    count = (
        len(expect.answer_contains)
        + len(expect.answer_matches)
        + len(expect.tools_called)
        + (expect.output_schema is not None)
        if expect is not None
        else 0
    )
    if not count:
        return "none"
    if not run.complete:
        return "not checked"
    return f"{sum(c.met for c in run.checks)}/{count} met"
