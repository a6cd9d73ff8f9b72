"""What the page shows, without a browser: long content collapsed, waiting sessions first."""

from __future__ import annotations

from datetime import UTC, datetime

from keel import ContentBlock, Message, TokenUsage, ToolResult, ToolUse
from keel.worker.client.reading import SessionSummary
from keel.worker.ui.access import is_loopback
from keel.worker.ui.views import LONG_CHARS, Shown, conversation, session_rows
from keel.workflows.messages import ToolResultContent


def test_long_text_is_collapsed_behind_a_one_line_preview() -> None:
    short = Shown.of("three\nshort\nlines")
    assert not short.collapsed
    long = Shown.of("word " * LONG_CHARS)
    assert long.collapsed and long.preview.endswith("…") and "\n" not in long.preview
    assert Shown.of("\n".join("line" for _ in range(12))).collapsed


def test_tool_results_are_named_after_their_tool() -> None:
    use = ToolUse(toolUseId="u1", name="read_file", input={"path": "a.txt"})
    result = ToolResult(
        toolUseId="u1", status="error", content=[ToolResultContent(text="no such file")]
    )
    [asked, answered] = conversation(
        [
            Message(role="assistant", content=[ContentBlock(toolUse=use)]),
            Message(role="user", content=[ContentBlock(toolResult=result)]),
        ]
    )
    [call] = asked.blocks
    assert call.kind == "tool_use" and call.title == "read_file"
    assert call.body.text == '{\n  "path": "a.txt"\n}'
    [outcome] = answered.blocks
    assert outcome.title == "read_file" and outcome.error and outcome.body.text == "no such file"


def test_sessions_waiting_for_a_person_come_first() -> None:
    def summary(name: str, minute: int, waiting: int | None) -> SessionSummary:
        at = datetime(2026, 1, 1, 12, minute, tzinfo=UTC)
        return SessionSummary(name, "running", at, None, "running", waiting, at)

    rows = session_rows(
        [summary("new", 30, 0), summary("old-waiting", 1, 2), summary("x", 20, None)]
    )
    assert [r.session for r in rows] == ["old-waiting", "new", "x"]
    assert rows[0].last_activity == "2026-01-01 12:01:00 UTC"


def test_loopback_names() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.com", ""))


def test_the_usage_area_shows_cost_and_unknown_cost_as_unknown() -> None:
    from keel import SessionConfig
    from keel.worker.ui.context import templates
    from keel.worker.ui.views import session_view
    from keel.workflows.contracts import PendingView, SessionState, TurnRecord
    from keel.workflows.cost import Spend

    usage = TokenUsage(inputTokens=20, outputTokens=20, totalTokens=40)
    helper = Spend(usage=usage, cost_usd=0.0002)
    state = SessionState(
        session_id="s",
        status="idle",
        config=SessionConfig(model="scripted:x.json"),
        message_count=0,
        pending=PendingView(),
        turns=[
            TurnRecord(turn_id=1, status="completed", usage=usage, cost_usd=0.0004),
            TurnRecord(turn_id=2, status="completed", usage=usage, cost_unknown=True),
        ],
        usage=usage + usage,
        cost_usd=0.0004,
        cost_unknown=True,
        sub_agents={"helper": helper},
    )
    view = session_view(state)
    assert view.cost == "at least $0.0004"
    assert [t.cost for t in view.turns] == ["$0.0004", "unknown"]  # never $0
    html = templates().get_template("_usage.html").render(view=view)
    assert "cost at least $0.0004" in html and "helper" in html and "$0.0002" in html
