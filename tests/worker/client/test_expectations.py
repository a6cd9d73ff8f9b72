"""A case's ``expect`` block checked against a replay's report (no server: pure checks)."""

from __future__ import annotations

from keel.worker.client.expectations import check_expectations, expectation_problems
from keel.worker.client.replays import CaseExpectation, ReplayReport, TurnReplay
from keel.workflows.messages import ToolUse

SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "refunded": {"type": "boolean"}},
    "required": ["order", "refunded"],
}


def report(answer: str, output: object, *tools: str) -> ReplayReport:
    calls = [ToolUse(toolUseId=f"t{i}", name=name, input={}) for i, name in enumerate(tools)]
    turns = [
        TurnReplay(turn=1, recorded_answer="", replayed_answer="first", replayed_calls=calls[:1]),
        TurnReplay(
            turn=2,
            recorded_answer="",
            replayed_answer=answer,
            replayed_calls=calls[1:],
            output=output,
        ),
    ]
    return ReplayReport(session="s", replay_session="s/replay-1", turns=turns)


def test_each_expectation_is_met_or_says_what_the_replay_did() -> None:
    expect = CaseExpectation(
        answer_contains=["refunded", "order 7"],
        answer_matches=[r"order \d+"],
        tools_called=["lookup", "refund"],
        output_schema=SCHEMA,
    )
    met = check_expectations(
        expect, report("refunded order 7", {"order": 7, "refunded": True}, "lookup", "refund")
    )
    assert [(c.check, c.met) for c in met] == [
        ("answer contains 'refunded'", True),
        ("answer contains 'order 7'", True),
        (r"answer matches 'order \\d+'", True),
        ("calls lookup", True),
        ("calls refund", True),
        ("output valid for the schema", True),
    ]
    unmet = check_expectations(
        expect, report("no refund", {"order": "7", "refunded": False}, "lookup")
    )
    assert [(c.met, c.detail) for c in unmet] == [
        (False, "the answer was 'no refund'"),
        (False, "the answer was 'no refund'"),
        (False, "the answer was 'no refund'"),
        (True, ""),
        (False, "the replay called lookup"),
        (False, "order: '7' is not of type 'integer'"),
    ]
    missing = check_expectations(CaseExpectation(output_schema=SCHEMA), report("x", None))
    assert [(c.met, c.detail) for c in missing] == [(False, "the last turn gave no output")]


def test_an_expect_block_that_cannot_be_checked_is_named() -> None:
    assert expectation_problems(CaseExpectation(answer_contains=["x"])) == []
    [regex] = expectation_problems(CaseExpectation(answer_matches=["ok", "(unclosed"]))
    assert regex.startswith("expect.answer_matches[1]: '(unclosed' is no regular expression")
    [schema] = expectation_problems(CaseExpectation(output_schema={"type": "nonsense"}))
    assert schema.startswith("expect.output_schema: ")
