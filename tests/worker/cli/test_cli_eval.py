"""``keel eval``, run as a user runs it in CI: exported cases, a new model, JUnit, a table.

Two sessions are recorded: one refunds order 7, the other order 8. The new model refunds 7:
the first's cases pass (or miss an expectation), the second's diverges. No tool runs.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from keel.worker.cli.eval_cases import case_sources, read_case
from keel.worker.cli.run_inputs import UsageError
from tests.helpers.cli import keel, keel_env
from tests.helpers.recordings import lines, one_line, recorded_responses, replaying


def write_case(path: Path, case: dict[str, Any], name: str, **expect: Any) -> str:
    path.write_text(json.dumps({**case, "name": name, "expect": expect}))
    return path.name


async def test_eval_passes_fails_and_writes_junit(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with replaying(temporal_env.client, server_env, tmp_path) as world:
        seven = await world.record(ledger)
        eight = await world.record(ledger, value="refund 8")
        exported = await world.run("export", seven, "--out", "seven.json")
        assert exported.returncode == 0, exported.stderr
        case = json.loads((tmp_path / "seven.json").read_text())
        passing = write_case(
            tmp_path / "pass.json",
            case,
            "refund-7",
            answer_contains=["5"],
            answer_matches=[r"\d \+ \d = 5"],
            tools_called=["add", "record"],
        )
        unmet = write_case(
            tmp_path / "unmet.json", case, "refund-7-seven", answer_contains=["seven"]
        )
        model = world.script(recorded_responses(ledger))
        junit = tmp_path / "out" / "junit.xml"
        junit.parent.mkdir()
        done = await world.run(
            "eval", passing, unmet, eight, "--model", model, "--junit", "out/junit.xml"
        )
        assert done.returncode == 1, done.stderr
        table = done.stdout.splitlines()
        assert table[0].split() == [
            "CASE",
            "TURNS",
            "DIVERGED",
            "EXPECTATIONS",
            "SECONDS",
            "RESULT",
        ]
        rows = {line.split()[0]: line.split() for line in table[1:4]}
        assert rows["refund-7"][1:4] == ["2/2", "no", "4/4"] and rows["refund-7"][-1] == "ok"
        assert rows["refund-7-seven"][1:4] == ["2/2", "no", "0/1"]
        assert rows[eight][1:5] == ["1/2", "turn", "1", "none"] and rows[eight][-1] == "FAIL"
        assert (
            "FAIL refund-7-seven: expected: answer contains 'seven'; the answer was '2 + 3 = 5'"
            in table
        )
        assert any(
            line.startswith(f"FAIL {eight}: DIVERGED at turn 1, call 1: the new model called ")
            for line in table
        ), table
        assert table[-1].startswith("3 case(s) in ") and table[-1].endswith(
            "(concurrency 4): 1 passed, 2 failed"
        )
        assert "evaluating [" in done.stderr and "3/3" in done.stderr

        suite = ET.parse(junit).getroot().find("testsuite")
        assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("3", "2")
        cases = {c.get("name"): c for c in suite.iter("testcase")}
        assert set(cases) == {"refund-7", "refund-7-seven", eight}
        assert cases["refund-7"].find("failure") is None
        unmet_failure = cases["refund-7-seven"].find("failure")
        assert unmet_failure is not None
        assert unmet_failure.get("message") == (
            "expected: answer contains 'seven'; the answer was '2 + 3 = 5'"
        )
        diverged = cases[eight].find("failure")
        assert diverged is not None and "refund 8" in (diverged.text or "")
        assert "DIVERGED at turn 1" in (diverged.get("message") or "")
        assert lines(ledger) == ["refund 7", "refund 8"], "an evaluation ran a tool"

        # the passing ones, by file and by session id, as JSON: exit 0
        as_json = await world.run("eval", passing, seven, "--model", model, "--json")
        assert as_json.returncode == 0, as_json.stderr
        report = json.loads(as_json.stdout)
        assert (report["passed"], report["failed"], report["concurrency"]) == (2, 0, 4)
        first, second = report["cases"]
        assert (first["case"], first["file"], first["turns"], first["diverged"]) == (
            "refund-7",
            passing,
            2,
            False,
        )
        assert [c["met"] for c in first["expectations"]] == [True] * 4
        assert (second["case"], second["file"], second["session"]) == (seven, None, seven)
    assert lines(ledger) == ["refund 7", "refund 8"]


def test_eval_refuses_what_is_not_a_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input exits 2 naming the file and the field, before any Temporal is looked for."""
    good = {"keel_case": 1, "name": "c", "settings": {"model": "scripted:x.json"}}
    (tmp_path / "notes.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "nosettings.json").write_text(json.dumps({"keel_case": 1, "name": "c"}))
    (tmp_path / "regex.json").write_text(json.dumps({**good, "expect": {"answer_matches": ["("]}}))
    (tmp_path / "schema.json").write_text(
        json.dumps({**good, "expect": {"output_schema": {"type": 7}}})
    )
    (tmp_path / "typo.json").write_text(json.dumps({**good, "expect": {"answer_contain": ["x"]}}))
    (tmp_path / "empty").mkdir()
    env = keel_env(KEEL_HOME=str(tmp_path / "home"))
    done = keel("eval", "regex.json", "--model", "scripted:x.json", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith(
        "keel: regex.json: expect.answer_matches[0]: '(' is no regular expression"
    )
    done = keel("eval", "notes.json", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith("keel: give the model to replay with"), done.stderr
    assert not (tmp_path / "home").exists()

    # the same checks, in this process (the command runs them before anything else)
    monkeypatch.chdir(tmp_path)
    said = {
        "notes.json": "notes.json: not a Keel case: it has no keel_case field",
        "broken.json": "broken.json: not valid JSON",
        "nosettings.json": "nosettings.json: not a Keel case: settings: Field required",
        "schema.json": "schema.json: expect.output_schema: ",
        "typo.json": "typo.json: not a Keel case: expect.answer_contain: Extra inputs",
        "missing.json": "missing.json: no such case file (nor a session id)",
        "empty": "empty: a folder with no case file (*.json) in it",
    }
    for name, words in said.items():
        with pytest.raises(UsageError) as refused:
            if Path(name).is_file():
                read_case(name)
            else:
                case_sources([name])
        assert str(refused.value).startswith(words), (name, refused.value)
    assert case_sources(["typo.json", "a-session"]) == (["typo.json"], ["a-session"])


async def test_twenty_cases_four_at_a_time(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with replaying(temporal_env.client, server_env, tmp_path) as world:
        session = await world.record(ledger)
        case = (await world.keel.export_case(session)).model_dump(mode="json")
        cases = tmp_path / "cases"
        cases.mkdir()
        for n in range(20):
            write_case(cases / f"case-{n:02}.json", case, f"case-{n:02}", tools_called=["add"])
        model = world.script(recorded_responses(ledger))
        began = time.monotonic()
        done = await world.run("eval", "cases", "--model", model, "--concurrency", "4", "--json")
        wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["passed"], report["failed"]) == (20, 0)
    assert sorted(c["case"] for c in report["cases"]) == [f"case-{n:02}" for n in range(20)]
    per_case = [c["seconds"] for c in report["cases"]]
    print(
        f"\nkeel eval: 20 cases of 2 turns, --concurrency 4: {report['seconds']:.2f} s in the "
        f"command ({wall:.2f} s with its start), {sum(per_case) / 20:.2f} s per replay on "
        f"average (max {max(per_case):.2f} s)"
    )
    assert lines(ledger) == ["refund 7"]
