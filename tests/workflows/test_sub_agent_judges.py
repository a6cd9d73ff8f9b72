"""Sub-agents and the judge rule, standing approvals (issue 39): a child inherits its parent's
judge rule and may only narrow it; it never runs on a standing approval from an approver it
dropped. Attacked through sub-agent tables (agent files, raw configurations) and sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from keel import AgentFileError, KeelClient, SessionConfig, SubAgent, load_agent_file
from keel.workflows.contracts import JudgeCriteria, StandingApproval
from keel.workflows.inheritance import child_config, inherited_standing
from tests.helpers.cli import keel as keel_cli
from tests.helpers.cli import keel_env
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.workflows.test_judge import settled
from tests.workflows.test_signed_approvals import keys
from tests.workflows.test_sub_agent_trust import boss, finished, sid, waiting

JUDGE = "tests.judges:approves_everything"
DOCS = JudgeCriteria(approve_when=['value startswith "docs/"'], deny_when=['path == "/etc"'])


def judged_parent(**extra: Any) -> SessionConfig:
    return SessionConfig(
        model="scripted:x", judge=JUDGE, judge_criteria={"guarded_record": DOCS}, **extra
    )


def test_a_child_keeps_its_parents_judge_rule_and_may_only_narrow_it() -> None:
    def child(**extra: Any) -> SessionConfig:
        return SessionConfig(model="scripted:y", **extra)

    inherited = child_config(judged_parent(), child(), "c")
    assert inherited.judge == JUDGE and inherited.judge_criteria == {"guarded_record": DOCS}
    assert inherited.judge_may_approve
    narrowed = child_config(
        judged_parent(),
        child(
            judge=JUDGE,
            judge_criteria={
                "guarded_record": JudgeCriteria(deny_when=['value == "x"'], min_confidence=0.1)
            },
        ),
        "c",
    ).judge_criteria["guarded_record"]
    assert narrowed.deny_when == ['path == "/etc"', 'value == "x"']  # the parent's stay
    assert narrowed.approve_when == DOCS.approve_when
    assert narrowed.min_confidence == DOCS.min_confidence  # not lowered
    refusals = [
        (SessionConfig(model="scripted:x"), child(judge=JUDGE), "parent has no judge"),
        (SessionConfig(model="scripted:x"), child(judge_model="scripted:j"), "may not add"),
        (judged_parent(), child(judge="tests.judges:unsure"), "keeps its parent's judge"),
        (judged_parent(), child(judge_model="scripted:j"), "keeps its parent's judge"),
        (
            judged_parent(),
            child(judge_criteria={"guarded_note": DOCS}),
            "judge_criteria for tool 'guarded_note'",
        ),
    ]
    for parent, sub, why in refusals:
        with pytest.raises(ValueError, match=why):
            child_config(parent, sub, "c")
    # under signed approvals, the child's judge only denies or escalates unless allowed
    signed = judged_parent(approvers=["alice"], approver_keys={"alice": "ed25519:A"})
    assert not child_config(signed, child(judge_may_approve=True), "c").judge_may_approve
    allowed = signed.model_copy(update={"sub_agent_judge_may_approve": True})
    assert child_config(allowed, child(), "c").judge_may_approve


def test_a_child_runs_only_on_standing_approvals_of_approvers_it_kept() -> None:
    alices = StandingApproval(tool="t", granted_by="alice", interrupt_id="i1", turn=1)
    bobs = StandingApproval(tool="u", granted_by="bob", interrupt_id="i2", turn=1)
    parent = SessionConfig(model="scripted:x", approvers=["alice", "bob"])
    only_bob = child_config(parent, SessionConfig(model="scripted:y", approvers=["bob"]), "c")
    assert inherited_standing(only_bob, [alices, bobs]) == [bobs]
    both = child_config(parent, SessionConfig(model="scripted:y"), "c")
    assert inherited_standing(both, [alices, bobs]) == [alices, bobs]
    # a child that asks signatures keeps only approvals signed by a key it kept
    signing = SessionConfig(model="scripted:y", approver_keys={"bob": "ed25519:AAAA"})
    assert inherited_standing(signing, [bobs]) == []


def test_an_agent_file_whose_sub_agent_adds_or_changes_a_judge_is_refused(
    tmp_path: Path,
) -> None:
    head = 'model = "scripted:x"\n'
    judged = f'judge = "{JUDGE}"\n[judge_criteria.guarded_record]\napprove_when = ["docs"]\n'
    sub = '\n[agents.helper]\ndescription = "Helps."\n'
    files = {
        "adds": (head + sub + f'judge = "{JUDGE}"\n', "agents.helper.judge", "no judge"),
        "changes": (
            head + judged + sub + 'judge = "tests.judges:unsure"\n',
            "agents.helper.judge",
            "keeps its parent's judge",
        ),
        "widens": (
            head
            + judged
            + sub
            + '[agents.helper.judge_criteria.guarded_note]\napprove_when=["x"]\n',
            "agents.helper.judge_criteria",
            "guarded_note",
        ),
        "stdlib": (head + 'judge = "sys:addaudithook"\n', "judge", "standard library"),
    }
    for name, (body, key, why) in files.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(body)
        with pytest.raises(AgentFileError, match=why) as caught:
            load_agent_file(path)
        assert f": {key}: " in str(caught.value), (name, caught.value)
    out = keel_cli(
        "run", "--agent", str(tmp_path / "adds.toml"), "hi", env=keel_env(), cwd=tmp_path
    )
    assert out.returncode == 2, out.stderr
    assert "agents.helper.judge" in out.stderr and "may not add" in out.stderr


async def test_a_raw_sub_agent_table_adding_a_judge_starts_no_child(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path
) -> None:
    """A configuration sent straight to Temporal: the parent refuses to start the child."""
    k = keys(tmp_path, "alice")
    out = tmp_path / "out.txt"
    config = boss(
        script,
        out,
        {"judge": JUDGE, "judge_criteria": {"guarded_record": DOCS}},
        approvers=["alice"],
        approver_keys={"alice": k["alice"][1]},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        record = await finished(keel, session, ack.turn_id)
        state = await keel.state(session)
    assert record.status == "completed" and not out.exists()
    [result] = [
        m.content[0].toolResult
        for m in state.messages
        if m.content and m.content[0].toolResult is not None
    ]
    assert result.status == "error" and "may not add one" in str(result.content)


@pytest.mark.parametrize("allowed", [False, True])
async def test_under_signed_approvals_the_childs_judge_only_escalates(
    keel: KeelClient, run_worker: RunWorker, script: Script, tmp_path: Path, allowed: bool
) -> None:
    k = keys(tmp_path, "alice")
    out = tmp_path / "out.txt"
    config = boss(
        script,
        out,
        {},
        approvers=["alice"],
        approver_keys={"alice": k["alice"][1]},
        judge=JUDGE,
        judge_criteria={"guarded_record": JudgeCriteria(approve_when=["anything"])},
        sub_agent_judge_may_approve=allowed,
    )
    session = sid()
    child = f"{session}/helper-h1"
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        if allowed:  # the parent said so: the judge approves in the child
            record = await finished(keel, session, ack.turn_id)
            assert record.status == "completed" and out.read_text() == "ran\n"
            return
        _, mirror = await waiting(keel, session, ack.turn_id)
        held = await settled(keel, child, 1)
        [pending] = held.interrupts
        assert "may only deny or escalate" in (pending.note or ""), pending.note
        assert not out.exists()
        await keel.decide(session, mirror.id, "approve", approver="alice", key=k["alice"][0])
        record = await finished(keel, session, ack.turn_id)
    assert record.status == "completed" and out.read_text() == "ran\n"


@pytest.mark.parametrize("child_approvers", [["bob"], ["alice"]])
async def test_a_child_that_dropped_an_approver_does_not_run_on_their_standing_approval(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    child_approvers: list[str],
) -> None:
    out = tmp_path / "out.txt"
    child = script(
        [
            respond(
                tool_use("g1", "guarded_record", path=str(out), value="child"), stop="tool_use"
            ),
            respond(text("helper done")),
        ],
        approvers=child_approvers,
    )
    config = script(
        [
            respond(
                tool_use("p1", "guarded_record", path=str(out), value="parent"), stop="tool_use"
            ),
            respond(tool_use("h1", "helper", prompt="write it"), stop="tool_use"),
            respond(text("boss done")),
        ],
        approvers=["alice", "bob"],
        agents={"helper": SubAgent(description="Helps.", config=child)},
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        _, first = await waiting(keel, session, ack.turn_id)
        await keel.decide(session, first.id, "approve", approver="alice", always=True)
        if child_approvers == ["alice"]:  # alice's approval stands in a child that kept her
            record = await finished(keel, session, ack.turn_id)
            assert record.status == "completed"
            assert out.read_text().splitlines() == ["parent", "child"]
            return
        _, asked = await waiting(keel, session, ack.turn_id)
        assert asked.tool_use.toolUseId == "g1" and asked.status == "pending"
        assert out.read_text().splitlines() == ["parent"]  # the child waits for bob
        await keel.decide(session, asked.id, "approve", approver="bob")
        record = await finished(keel, session, ack.turn_id)
    assert record.status == "completed"
    assert out.read_text().splitlines() == ["parent", "child"]
