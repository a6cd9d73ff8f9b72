"""What ``keel eval`` checks of a case's replay besides its divergence: the ``expect`` block.

A case (``ReplayCase``) may say what its replay must also do (``CaseExpectation``): its last
turn's answer contains texts or matches regular expressions, the replay calls tools, the last
turn's structured output is valid for a JSON Schema. ``expectation_problems`` refuses a block
that cannot be checked (a regular expression or a schema that is not one) before anything
runs; ``check_expectations`` checks a replay against it.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
from pydantic import BaseModel

from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.replays import CaseExpectation, ReplayReport


class ExpectationCheck(BaseModel):
    """One expectation of a case, checked.

    Attributes:
        check: what was expected, in words (``answer contains 'refunded'``).
        met: whether the replay did it.
        detail: what the replay did instead, when it did not.
    """

    check: str
    met: bool
    detail: str = ""


def expectation_problems(expect: CaseExpectation) -> list[str]:
    """What makes an ``expect`` block uncheckable, each naming its field; empty when none."""
    problems = []
    for i, pattern in enumerate(expect.answer_matches):
        try:
            re.compile(pattern)
        except re.error as err:
            problems.append(
                f"expect.answer_matches[{i}]: {pattern!r} is no regular expression: {err}"
            )
    if expect.output_schema is not None:
        try:
            check_output_schema(expect.output_schema)
        except OutputSchemaError as err:
            problems.append(f"expect.output_schema: {err}")
    return problems


def check_expectations(expect: CaseExpectation, report: ReplayReport) -> list[ExpectationCheck]:
    """Each expectation of ``expect``, checked against a replay that reached its last turn.

    The answer and the structured output are the last replayed turn's; the tools called are
    those of every replayed turn (answered from the recording, or run live).
    """
    last = report.turns[-1] if report.turns else None
    answer = (last.replayed_answer if last is not None else None) or ""
    said = _quoted(answer)
    checks = []
    for text in expect.answer_contains:
        met = text in answer
        checks.append(
            ExpectationCheck(
                check=f"answer contains {text!r}",
                met=met,
                detail="" if met else f"the answer was {said}",
            )
        )
    for pattern in expect.answer_matches:
        met = re.search(pattern, answer) is not None
        checks.append(
            ExpectationCheck(
                check=f"answer matches {pattern!r}",
                met=met,
                detail="" if met else f"the answer was {said}",
            )
        )
    called = [use.name for turn in report.turns for use in turn.replayed_calls]
    for tool in expect.tools_called:
        met = tool in called
        calls = ", ".join(dict.fromkeys(called)) or "no tool"
        checks.append(
            ExpectationCheck(
                check=f"calls {tool}",
                met=met,
                detail="" if met else f"the replay called {calls}",
            )
        )
    if expect.output_schema is not None:
        checks.append(_output_check(expect.output_schema, last.output if last else None))
    return checks


def _output_check(schema: dict[str, Any], output: Any) -> ExpectationCheck:
    """Whether the last turn's structured output is valid for ``schema``."""
    check = "output valid for the schema"
    if output is None:
        return ExpectationCheck(check=check, met=False, detail="the last turn gave no output")
    validator = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(output))
    if error is None:
        return ExpectationCheck(check=check, met=True)
    where = "/".join(str(p) for p in error.absolute_path) or "the output"
    return ExpectationCheck(check=check, met=False, detail=f"{where}: {error.message}")


def _quoted(text: str, limit: int = 200) -> str:
    """A text for a one-line detail: quoted, cut at ``limit`` characters."""
    if len(text) > limit:
        return repr(text[:limit]) + f" (+{len(text) - limit} characters)"
    return repr(text)
