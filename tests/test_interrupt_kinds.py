"""An interrupt kind is declared in one place, and the workflow's checks and every view follow.

``keel.workflows.interrupt_kinds`` declares each kind: the checks that refuse a ``respond`` to
an approval, the CLI's lines and commands, the JSON view, a notification and the web page read
the declaration. A throwaway kind registered here (in the test only) shows that a new kind
needs no change to any of them.
"""

from __future__ import annotations

import typing

import pytest

from keel import ToolUse
from keel.worker.cli.console import decide_commands, interrupt_json, print_interrupts
from keel.worker.cli.follow import progress_line
from keel.worker.ui.context import templates
from keel.worker.ui.views import InterruptView, interrupts
from keel.workflows.approvals import check_answer, check_decision, denial_text
from keel.workflows.boundary import InputRejected
from keel.workflows.contracts import (
    Answer,
    Decision,
    Event,
    Interrupt,
    InterruptKind,
    SessionConfig,
)
from keel.workflows.interrupt_kinds import KINDS, VERBS, KindSpec
from keel.workflows.notifications import interrupt_event

DEMO = KindSpec(
    name="demo",
    noun="a demo",
    verbs=("approve", "deny"),
    standing=False,
    heading="demo for {tool}: {reason}",
    waiting="waiting for a demo: {name}, interrupt {id}",
    progress="a demo waits",
    page_heading="Demo of {tool}?",
    notice="Keel session {session}: demo of {tool}: {reason}. Approve: {command}",
    model_texts={"*": "demo of {tool!r} refused{who}: {why}"},
)


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch) -> Interrupt:
    """A pending interrupt of the ``demo`` kind, registered for this test only."""
    monkeypatch.setitem(KINDS, "demo", DEMO)
    interrupt = Interrupt(
        id="i-1",
        tool_use=ToolUse(toolUseId="t-1", name="ship", input={"to": "prod"}),
        name="ship",
        reason="it goes out",
        turn=1,
    )
    # InterruptKind (the contract) does not list it: a real kind is added there too.
    return interrupt.model_copy(update={"kind": "demo"})


def _page(views: list[InterruptView]) -> str:
    view = type("View", (), {"interrupts": views, "said": [], "standing": [], "session": "s 1"})
    return (
        templates()
        .get_template("_pending.html")
        .render(view=view, csrf="c", identity="ann", signs_as=None, signer=None)
    )


def test_every_kind_of_the_contract_is_declared_once() -> None:
    assert set(KINDS) == set(typing.get_args(InterruptKind))
    for name, spec in KINDS.items():
        assert spec.name == name
        assert spec.verbs and all(verb in VERBS for verb in spec.verbs)
        assert len({VERBS[verb].update for verb in spec.verbs}) == 1, name
        assert "{tool}" in spec.page_heading


def test_a_new_kind_is_checked_as_declared(demo: Interrupt) -> None:
    config = SessionConfig(model="scripted:x.json")
    pending = {demo.id: demo}
    assert check_decision(pending, Decision(interrupt_id="i-1", decision="deny"), config) is demo
    with pytest.raises(InputRejected, match="interrupt 'i-1' is a demo; use decide"):
        check_answer(pending, Answer(interrupt_id="i-1", value="yes"), config)
    denied = demo.model_copy(
        update={"status": "denied", "decided_by": "ann", "decision_reason": "not today"}
    )
    assert denial_text(denied) == "demo of 'ship' refused by ann: not today"


def test_a_new_kind_shows_in_the_cli_and_its_json(
    demo: Interrupt, capsys: pytest.CaptureFixture[str]
) -> None:
    assert decide_commands("s 1", demo) == [
        "keel approve 's 1' i-1",
        "keel deny 's 1' i-1 --reason '...'",
    ]
    print_interrupts("s 1", [demo])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "demo for ship: it goes out"
    assert lines[-2:] == ["  keel approve 's 1' i-1", "  keel deny 's 1' i-1 --reason '...'"]
    assert interrupt_json(demo)["kind"] == "demo"


def test_a_new_kind_shows_in_keel_runs_progress(demo: Interrupt) -> None:
    detail = {"kind": demo.kind, "id": demo.id, "tool": "ship", "tool_use_id": "t-1"}
    created = Event(seq=3, type="interrupt_created", at="2026-01-01T00:00:00+00:00", detail=detail)
    assert progress_line(created) == "a demo waits: ship (interrupt i-1)"


def test_a_new_kind_shows_in_a_notification(demo: Interrupt) -> None:
    event = interrupt_event("s 1", demo, "2026-01-01T00:00:00+00:00")
    assert event["kind"] == "demo"
    assert event["command"] == "keel approve 's 1' i-1"
    assert event["deny_command"] == "keel deny 's 1' i-1 --reason '...'"
    assert event["text"] == (
        "Keel session s 1: demo of ship: it goes out. Approve: keel approve 's 1' i-1"
    )


def test_a_new_kind_shows_on_the_web_page_with_its_buttons(demo: Interrupt) -> None:
    html = _page(interrupts([demo]))
    assert "Demo of <code>ship</code>?" in html
    assert 'action="/sessions/s%201/decide"' in html
    assert 'value="approve"' in html and 'value="deny"' in html
    assert "approve-always" not in html  # not declared standing
    assert "/respond" not in html


def test_the_declared_kinds_keep_their_page(demo: Interrupt) -> None:
    approval = demo.model_copy(update={"kind": "approval"})
    question = demo.model_copy(update={"kind": "question", "name": "which"})
    html = _page(interrupts([approval, question]))
    assert "Approve <code>ship</code>?" in html
    assert "<code>ship</code> asks: which" in html
    assert html.count("/decide") == 1 and html.count("/respond") == 1
    assert html.count('value="approve-always"') == 1
    assert decide_commands("s", question) == ["keel respond s i-1 '<answer: JSON or text>'"]
