"""Effect classes a session sets for tools: an agent file's ``effects`` table (and its
sub-agents'), and ``keel run --effect TOOL=CLASS``, into ``SessionConfig.tool_effects``."""

from __future__ import annotations

from pathlib import Path

import pytest

from keel import AgentFileError, load_agent_file
from keel.worker.cli.main import build_parser
from keel.worker.cli.run_inputs import UsageError, new_session_config, read_agent
from tests.helpers.cli import keel, keel_env

TOP = """model = "scripted:x.json"
effects = { refund = "write", lookup = "read" }

[agents.clerk]
description = "Looks things up."
effects = { lookup = "idempotent", fetch = "read" }

[agents.clerk.agents.junior]
description = "Looks more things up."

[agents.other]
description = "Uses its parent's classes."
"""


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(body)
    return path


def test_effects_become_tool_effects_and_sub_agents_inherit_them(tmp_path: Path) -> None:
    agent = load_agent_file(write(tmp_path, TOP))
    assert agent.config.tool_effects == {"refund": "write", "lookup": "read"}
    clerk = agent.agents["clerk"]
    # its own classes over its parent's, tool by tool
    assert clerk.config.tool_effects == {"refund": "write", "lookup": "idempotent", "fetch": "read"}
    assert clerk.agents["junior"].config.tool_effects == clerk.config.tool_effects
    assert agent.agents["other"].config.tool_effects == agent.config.tool_effects
    # what the session is sent: the sub-agents' configurations carry them too
    assert agent.config.agents["clerk"].config.tool_effects["lookup"] == "idempotent"


def test_an_effects_table_section_works_too(tmp_path: Path) -> None:
    body = 'model = "scripted:x.json"\n\n[effects]\nrefund = "write"\n"get-sum" = "read"\n'
    agent = load_agent_file(write(tmp_path, body))
    assert agent.config.tool_effects == {"refund": "write", "get-sum": "read"}
    plain = load_agent_file(write(tmp_path, 'model = "scripted:x.json"\n'))
    assert plain.config.tool_effects == {}


@pytest.mark.parametrize(
    ("body", "where", "line", "said"),
    [
        (
            'model = "scripted:x"\neffects = { refund = "rw" }\n',
            "effects.refund",
            2,
            "tool 'refund': effect 'rw' is not one of read, idempotent, write",
        ),
        (
            'model = "scripted:x"\n\n[effects]\nlookup = "read"\nrefund = "WRITE"\n',
            "effects.refund",
            5,
            "tool 'refund': effect 'WRITE' is not one of read, idempotent, write",
        ),
        (
            'model = "scripted:x"\neffects = { refund = 1 }\n',
            "effects.refund",
            2,
            "tool 'refund': effect 1 is not one of read, idempotent, write",
        ),
        (
            'model = "scripted:x"\n[agents.a]\ndescription = "d"\n'
            'effects = { "bad name" = "read" }\n',
            "agents.a.effects.bad name",
            4,
            "'bad name' is not a tool name",
        ),
        ('model = "scripted:x"\neffects = "read"\n', "effects", 2, "valid dictionary"),
    ],
)
def test_a_bad_effect_names_the_tool_the_value_and_the_classes(
    tmp_path: Path, body: str, where: str, line: int, said: str
) -> None:
    with pytest.raises(AgentFileError) as caught:
        load_agent_file(write(tmp_path, body))
    message = str(caught.value)
    assert f"agent.toml:{line}: {where}: " in message and said in message, message


# ----------------------------------------------------------------------------- --effect


def _config(*argv: str, agent: Path | None = None) -> dict[str, str]:
    args = build_parser().parse_args(["run", *argv, "hi"])
    file = read_agent(str(agent), "scripted:x.json") if agent else None
    return dict(new_session_config(args, "scripted:x.json", file).tool_effects)


def test_effect_flags_set_classes_over_the_agent_file(tmp_path: Path) -> None:
    assert _config() == {}
    assert _config("--effect", "refund=write", "--effect", " lookup = read ") == {
        "refund": "write",
        "lookup": "read",
    }
    path = write(tmp_path, TOP)
    assert _config(agent=path) == {"refund": "write", "lookup": "read"}
    merged = _config("--effect", "lookup=idempotent", "--effect", "x=write", agent=path)
    assert merged == {"refund": "write", "lookup": "idempotent", "x": "write"}


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("refund", "--effect 'refund': expected TOOL=CLASS"),
        ("refund=", "--effect 'refund=': expected TOOL=CLASS"),
        ("refund=maybe", "tool 'refund': effect 'maybe' is not one of read, idempotent, write"),
        ("no such=read", "'no such' is not a tool name"),
    ],
)
def test_a_bad_effect_flag_is_refused(flag: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        _config("--effect", flag)
    assert said in str(caught.value)
    with pytest.raises(UsageError, match="tool 'a' is given twice"):
        _config("--effect", "a=read", "--effect", "a=write")


def test_keel_run_with_a_bad_effect_exits_2(tmp_path: Path) -> None:
    env = keel_env(KEEL_HOME=str(tmp_path / "home"))
    out = keel(
        "run", "--model", "scripted:x.json", "--effect", "refund=rw", "hi", env=env, cwd=tmp_path
    )
    assert out.returncode == 2, out.stderr
    assert "--effect: tool 'refund': effect 'rw' is not one of read, idempotent, write" in (
        out.stderr
    )


def test_the_agents_page_example_of_effects_loads(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "agents.md").read_text()
    [example] = [b for b in page.split("```toml\n")[1:] if b.startswith("effects = {")]
    body = 'model = "scripted:x.json"\n' + example.split("```")[0]
    agent = load_agent_file(write(tmp_path, body))
    assert agent.config.tool_effects == {"refund": "write", "lookup": "read"}
    assert agent.agents["clerk"].config.tool_effects == {
        "refund": "write",
        "lookup": "read",
        "order_status": "read",
    }


def test_a_sub_agent_may_not_treat_a_tool_more_loosely_than_its_parent(tmp_path: Path) -> None:
    body = TOP.replace(
        'effects = { lookup = "idempotent", fetch = "read" }', 'effects = { refund = "read" }'
    )
    with pytest.raises(AgentFileError) as caught:
        load_agent_file(write(tmp_path, body))
    said = str(caught.value)
    assert "agents.clerk.effects.refund" in said
    assert "may not treat tool 'refund' as 'read': its parent treats it as 'write'" in said


def test_the_session_refuses_a_looser_sub_agent_however_it_was_sent() -> None:
    """A config sent by raw start (not through an agent file) meets the same rule."""
    from keel.workflows.boundary import InputRejected
    from keel.workflows.contracts import SessionConfig
    from keel.workflows.inheritance import child_config

    parent = SessionConfig(model="scripted:x", tool_effects={"refund": "write"})
    stricter = child_config(
        parent, SessionConfig(model="scripted:y", tool_effects={"lookup": "idempotent"}), "c"
    )
    assert stricter.tool_effects == {"refund": "write", "lookup": "idempotent"}
    with pytest.raises(InputRejected, match="may not treat tool 'refund' as 'idempotent'"):
        child_config(
            parent, SessionConfig(model="scripted:y", tool_effects={"refund": "idempotent"}), "c"
        )
