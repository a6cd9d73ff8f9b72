"""Commands Keel prints for a person to copy are shell-safe; hostile session ids are refused.

The printers are attacked with ids that would run code if pasted unquoted. Each printed
command is parsed back (``shlex.split``) and run through ``bash -c`` with ``keel`` stubbed
out: bash must hand it exactly the argv meant, and no ``PWNED`` file may appear. The
``keel`` command itself refuses such ids (exit 2) before it contacts Temporal.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from keel import Interrupt, ToolUse
from keel.worker.cli.console import print_detached, print_interrupts, print_where
from keel.worker.shell import MAX_NEW_SESSION_ID, SESSION_ID_CHARS, command, session_id_problem
from keel.workflows.notifications import interrupt_event
from tests.helpers.cli import keel, keel_env
from tests.helpers.shell import run_copied
from tests.helpers.temporal import free_port

HOSTILE = [
    "q$(touch PWNED)",
    "a b",
    "it's",
    "`touch PWNED`",
    "x'; touch PWNED; echo '",
    '$(touch PWNED)\'"$(touch PWNED)"',
    "-rf",
    "semi;touch PWNED",
    "line\ntouch PWNED",
]


def interrupt(interrupt_id: str, kind: str = "approval") -> Interrupt:
    return Interrupt(
        id=interrupt_id,
        kind=kind,  # type: ignore[arg-type]
        tool_use=ToolUse(toolUseId="t1", name="echo", input={"text": "hi"}),
        name="approval" if kind == "approval" else "color",
        reason="echo needs approval",
        turn=1,
    )


def indented_commands(printed: str) -> list[str]:
    """The commands of printed output: each line ``  keel ...``, with the lines a quoted
    newline carries it on to (as a person's selection would hold them)."""
    commands: list[str] = []
    pending: str | None = None
    for line in printed.splitlines():
        if pending is not None:
            pending += "\n" + line
        elif line.startswith("  keel "):
            pending = line.strip()
        else:
            continue
        try:
            shlex.split(pending)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        commands.append(pending)
        pending = None
    assert pending is None, pending
    return commands


@pytest.mark.parametrize("session", HOSTILE)
def test_printed_commands_run_exactly_the_keel_command_meant(
    session: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_interrupt = "i$(touch PWNED)"
    print_interrupts(session, [interrupt(hostile_interrupt), interrupt("q1", "question")])
    pending = indented_commands(capsys.readouterr().out)
    print_where(session)
    where = [
        c.removesuffix(what).rstrip()
        for c, what in zip(
            indented_commands(capsys.readouterr().err),
            ("the next turn", "follow it live", "the conversation and its usage"),
            strict=True,
        )
    ]
    print_detached(session, 2)
    detached = re.fullmatch(
        r"turn 2 of session .* runs; `(keel .*?)` prints its result, `(keel .*?)` follows it\n",
        capsys.readouterr().err,
        re.DOTALL,
    )
    assert detached is not None
    lines = [*pending, *where, *detached.groups()]
    meant = [
        ["keel", "approve", session, hostile_interrupt],
        ["keel", "deny", session, hostile_interrupt, "--reason", "..."],
        ["keel", "respond", session, "q1", "<answer: JSON or text>"],
        ["keel", "run", "--session", session, "PROMPT"],
        ["keel", "watch", session],
        ["keel", "show", session],
        ["keel", "wait", session],
        ["keel", "watch", session],
    ]
    assert [shlex.split(line) for line in lines] == meant
    for line, argv in zip(lines, meant, strict=True):
        assert run_copied(line, tmp_path) == argv[1:]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("session", HOSTILE)
def test_webhook_commands_are_quoted_the_same_way(session: str, tmp_path: Path) -> None:
    approval = interrupt_event(session, interrupt("i1"), "2026-01-01T00:00:00Z")
    question = interrupt_event(session, interrupt("q1", "question"), "2026-01-01T00:00:00Z")
    for event, argv in (
        (approval, ["approve", session, "i1"]),
        (question, ["respond", session, "q1", "<answer: JSON or text>"]),
    ):
        assert shlex.split(event["command"]) == ["keel", *argv]
        assert run_copied(event["command"], tmp_path) == argv
    deny = ["keel", "deny", session, "i1", "--reason", "..."]
    assert shlex.split(approval["deny_command"]) == deny
    assert not (tmp_path / "PWNED").exists()


def test_command_leaves_plain_words_as_they_are() -> None:
    assert command("keel", "approve", "nightly-2026-12-01T02:00:00Z", "6f1c") == (
        "keel approve nightly-2026-12-01T02:00:00Z 6f1c"
    )
    assert command("keel", "show", "p/agent-0123456789ab") == "keel show p/agent-0123456789ab"


@pytest.mark.parametrize(
    "session",
    [
        "session-0123456789ab",  # keel run's own
        "nightly-2026-12-01T02:00:00Z",  # a schedule's firing (Temporal's RFC 3339, UTC)
        "x" * 200 + "-2026-12-01T02:00:00Z",  # the longest schedule name's
        "p/agent-0123456789ab",  # run_agent's child
        "p/research-tooluse_AbC-12_x/agent-00ff",  # a sub-agent's, and its child
        "p/coder-call_abc123",  # an OpenAI tool call id
        "ana@example.com:ticket.42",
    ],
)
def test_every_id_keel_makes_is_a_session_id(session: str) -> None:
    assert session_id_problem(session) is None


def test_an_id_for_a_new_session_is_at_most_200_characters() -> None:
    assert session_id_problem("x" * MAX_NEW_SESSION_ID, new=True) is None
    assert "201 characters" in str(session_id_problem("x" * 201, new=True))
    assert "1001 characters" in str(session_id_problem("x" * 1001))
    assert session_id_problem("-rf") is not None
    assert session_id_problem("") is not None


# Each command that names a session, with a hostile one (S).
ON_A_SESSION = [
    ["run", "--session", "S", "hello"],
    ["approve", "S", "i1"],
    ["deny", "S", "i1", "--reason", "no"],
    ["respond", "S", "i1", "yes"],
    ["steer", "S", "metric units"],
    ["cancel", "S"],
    ["pending", "S"],
    ["show", "S"],
    ["watch", "S"],
    ["wait", "S"],
]


def test_a_hostile_session_id_is_refused_before_temporal_is_contacted(tmp_path: Path) -> None:
    # Nothing listens there: a command that went on would exit 1, "cannot reach Temporal".
    env = keel_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", KEEL_HOME=str(tmp_path / "h"))
    for hostile in ("q$(touch PWNED)", "a b", "x" * 1001):
        for args in ON_A_SESSION:
            argv = [hostile if a == "S" else a for a in args]
            done = keel(*argv, env=env, cwd=tmp_path, timeout=60)
            assert done.returncode == 2, (argv, done.stderr)
            [line] = done.stderr.strip().splitlines()
            name = "--session" if args[0] == "run" else "session"
            assert line.startswith(f"keel {args[0]}: argument {name}: "), line
            assert SESSION_ID_CHARS in line and "Temporal" not in line, line
    assert not (tmp_path / "PWNED").exists()


def test_an_id_keel_made_passes_the_check(tmp_path: Path) -> None:
    # A schedule's session and a sub-agent's get as far as Temporal (here: not reachable).
    port = free_port()
    env = keel_env(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", KEEL_HOME=str(tmp_path / "h"))
    for session in ("nightly-2026-12-01T02:00:00Z", "p/research-tooluse_AbC-12"):
        done = keel("show", session, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == 1, done.stderr
        assert f"cannot reach Temporal at 127.0.0.1:{port}" in done.stderr


async def test_a_new_session_id_over_200_characters_starts_nothing(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    session = "s" * (MAX_NEW_SESSION_ID + 1)
    done = keel("run", "--session", session, "--model", "scripted:x.json", "hi", env=server_env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("keel: --session: the session id is 201 characters long"), line
    with pytest.raises(RPCError) as missing:
        await temporal_env.client.get_workflow_handle(session).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
