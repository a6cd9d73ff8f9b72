"""How an unknown outcome reads for a person: the commands offered, a retry, the terminal ask.

Every list of interrupts with the commands that decide them (``keel pending``, ``keel run``'s
and ``wait``'s lines, a notification) offers an ``outcome_unknown`` interrupt approve, deny and
resolve; ``keel watch`` and ``--progress`` name a tool run again (``tool_retried``).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from keel.worker.cli import console
from keel.worker.cli.console import ask_decision, decide_commands, print_interrupts
from keel.worker.cli.follow import event_line, progress_line
from keel.worker.client.effects_listing import retried_text
from keel.workflows.contracts import Event
from keel.workflows.notifications import interrupt_event
from tests.helpers.outcome_unknown import AT, outcome_unknown, retried_event


def event(type_: str, **detail: Any) -> Event:
    return Event(seq=7, type=type_, at=AT, turn=1, cycle=2, detail=detail)


def test_a_retry_reads_as_a_line_in_watch_and_progress() -> None:
    retried = retried_event(7)
    assert event_line(retried).split(None, 1)[1] == (
        "7 t1.c1   tool_retried      refund (t2): retried (attempt 2): previous attempt "
        "ended without a result"
    )
    assert progress_line(retried) == (
        "tool refund retried (attempt 2): previous attempt ended without a result"
    )
    # an event that does not say how the attempt before ended still reads
    assert retried_text({"tool": "refund", "attempt": 3}) == "retried (attempt 3)"


def test_progress_names_the_kind_of_interrupt_that_opened() -> None:
    lines = [
        progress_line(event("interrupt_created", kind=kind, id="i-1", tool="refund"))
        for kind in ("approval", "question", "outcome_unknown")
    ]
    assert lines == [
        "approval needed: refund (interrupt i-1)",
        "answer needed: refund (interrupt i-1)",
        "outcome unknown, a person decides whether it runs again: refund (interrupt i-1)",
    ]


def test_pending_and_turn_lines_offer_approve_deny_and_resolve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    interrupt = outcome_unknown()
    commands = decide_commands("s 1", interrupt, ["--mcp", "db=x"])
    assert commands == [
        "keel approve 's 1' ou-1 --mcp db=x",
        "keel deny 's 1' ou-1 --mcp db=x --reason '...'",
        "keel resolve 's 1' ou-1 --mcp db=x --result '...'",
    ]
    # each reads back as the command it names, its flags where keel resolve takes them
    assert shlex.split(commands[2]) == [
        "keel",
        "resolve",
        "s 1",
        "ou-1",
        "--mcp",
        "db=x",
        "--result",
        "...",
    ]
    print_interrupts("s 1", [interrupt])
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "outcome unknown: tool 'refund' may have run: its attempt 1 ended without a result"
    )
    assert out[-1] == "  keel resolve 's 1' ou-1 --result '...'"


def test_a_notification_carries_the_resolve_command() -> None:
    sent = interrupt_event("s 1", outcome_unknown(), AT)
    assert sent["kind"] == "outcome_unknown"
    assert sent["command"] == "keel approve 's 1' ou-1"
    assert sent["deny_command"] == "keel deny 's 1' ou-1 --reason '...'"
    assert sent["resolve_command"] == "keel resolve 's 1' ou-1 --result '...'"
    assert "record its result with keel resolve" in sent["text"]
    approval = interrupt_event("s 1", outcome_unknown(kind="approval"), AT)
    assert approval["resolve_command"] is None


def answers(monkeypatch: pytest.MonkeyPatch, *typed: str | None) -> list[str]:
    """Type ``typed`` at ``ask``'s questions, in order; returns the questions asked."""
    asked: list[str] = []
    given = list(typed)

    async def ask(question: str) -> str | None:
        asked.append(question)
        return given.pop(0)

    monkeypatch.setattr(console, "ask", ask)
    return asked


async def test_the_terminal_offers_to_record_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    interrupt = outcome_unknown()
    asked = answers(monkeypatch, "r", "refund 7 went through")
    assert await ask_decision(interrupt) == ("resolve", "refund 7 went through")
    assert asked == ["run it again? [y/N, r: record its result] ", "its result (one line): "]

    answers(monkeypatch, "y")
    assert await ask_decision(interrupt) == ("approve", None)
    answers(monkeypatch, "n", "not twice")
    assert await ask_decision(interrupt) == ("deny", "not twice")
    answers(monkeypatch, "r", None)  # end of input at the result: nothing decided
    assert await ask_decision(interrupt) is None
    asked = answers(monkeypatch, "r", " ", "done")  # a blank result is asked again
    assert await ask_decision(interrupt) == ("resolve", "done")
    assert asked[-1] == "its result (one line, not blank): "

    # an approval is asked as before: "r" is no answer of its, and denies
    approval = outcome_unknown(kind="approval")
    asked = answers(monkeypatch, "r", "")
    assert await ask_decision(approval) == ("deny", None)
    assert asked[0] == "approve? [y/N] "
