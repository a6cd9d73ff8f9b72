"""Agent files: ``keel run --agent FILE.toml`` and ``load_agent_file``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keel import AgentFileError, load_agent_file
from tests.helpers.cli import keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(body)
    return path


def test_valid_file_with_sub_agent_and_schema_file(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text(json.dumps(SCHEMA))
    path = write(
        tmp_path,
        f"""
model = "scripted:m.json"
system = "You plan."
tools = ["{SAMPLE_TOOLS}", "mcp:files"]
require_approval = ["echo"]
approvers = ["ann"]
approval_timeout_s = 60
max_cycles = 5
token_budget = 10000
context_messages = 20
output_schema = "out.json"

[agents.researcher]
description = "Finds facts."
system = "You research."
output_schema = {{ type = "object", properties = {{ fact = {{ type = "string" }} }} }}
""",
    )
    agent = load_agent_file(path)
    config = agent.config
    assert config.model == f"scripted:{tmp_path / 'm.json'}" or config.model == "scripted:m.json"
    assert config.tool_modules == [SAMPLE_TOOLS, "mcp:files"]
    assert config.approval_tools == ["echo"] and config.approvers == ["ann"]
    assert config.approval_timeout_s == 60 and config.max_cycles_per_turn == 5
    assert config.max_session_tokens == 10000 and config.context_messages == 20
    assert config.output_schema == SCHEMA
    sub = agent.agents["researcher"]
    assert sub.description == "Finds facts." and sub.config.system == "You research."
    assert sub.config.model == config.model  # inherited
    assert config.agents["researcher"].description == "Finds facts."  # what the session offers
    assert config.agents["researcher"].config == sub.config
    assert sub.config.output_schema == {
        "type": "object",
        "properties": {"fact": {"type": "string"}},
    }


@pytest.mark.parametrize(
    ("body", "key", "line"),
    [
        ('model = "scripted:x"\n\nmodle = "oops"\n', "modle", 3),
        ('model = "scripted:x"\nmax_cycles = "five"\n', "max_cycles", 2),
        ('model = "scripted:x"\ntools = "echo"\n', "tools", 2),
        ('model = "scripted:x"\noutput_schema = { type = "nonsense" }\n', "output_schema", 2),
        ('model = "scripted:x"\noutput_schema = "missing.json"\n', "output_schema", 2),
        (
            'model = "scripted:x"\n[agents.a]\ndescription = "d"\n[agents.a.agents.a]\n'
            'description = "again"\n',
            "agents.a.agents.a",
            4,
        ),
        (
            'model = "scripted:x"\n[agents.a]\ndescription = "d"\n[agents.a.agents.b]\n'
            'description = "d"\n[agents.a.agents.b.agents.c]\ndescription = "deep"\n',
            "agents.a.agents.b.agents.c",
            6,
        ),
        (
            'model = "scripted:x"\n[agents.a]\nsystem = "no description"\n',
            "agents.a.description",
            2,
        ),
        (
            'model = "scripted:x"\n[agents.helper]\ndescription = "d"\nmax_cycles = 0\n',
            "agents.helper.max_cycles",
            4,
        ),
        (
            'model = "scripted:x"\napprovers = ["alice"]\n[agents.helper]\ndescription = "d"\n'
            'approvers = ["mallory"]\n',
            "agents.helper.approvers",
            5,
        ),
        ('system = "no model anywhere"\n', "model", None),
        ('model = "scripted:x"\nnotify = ["ftp://files.example/drop"]\n', "notify", 2),
        ('system = "s"\nmodel = "openai:llama3?timeout=abc"\n', "model", 2),
        (
            'model = "scripted:x"\n[agents.a]\ndescription = "d"\nmodel = "gpt5:x"\n',
            "agents.a.model",
            4,
        ),
        (
            'model = "scripted:x"\njudge_model = "bedrock:m?colour=red"\n',
            "judge_model",
            2,
        ),
    ],
)
def test_invalid_files_name_key_and_line(
    tmp_path: Path, body: str, key: str, line: int | None
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(AgentFileError) as caught:
        load_agent_file(path)
    message = str(caught.value)
    assert f": {key}: " in message
    if line is not None:
        assert f"agent.toml:{line}:" in message and f"(line {line})" in message


def test_a_bad_model_option_names_the_option_what_it_takes_key_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'system = "s"\nmodel = "openai:llama3?timeout=abc"\n')
    with pytest.raises(AgentFileError) as caught:
        load_agent_file(path)
    assert str(caught.value) == (
        f"{path}:2: model: option timeout of openai takes a number of seconds > 0, got 'abc' "
        "(line 2)"
    )


def test_notify_urls_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'model = "scripted:x"\nnotify = ["https://hooks.example/a"]\n')
    assert load_agent_file(path).config.notify == ["https://hooks.example/a"]


def test_the_jobs_page_agent_file_loads() -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "nightly.toml"
    config = load_agent_file(example).config
    assert config.model.endswith("activities/examples/approval.json")
    assert config.tool_modules == ["keel.activities.examples.workspace"] and config.notify == []


def test_not_toml(tmp_path: Path) -> None:
    with pytest.raises(AgentFileError, match="not valid TOML"):
        load_agent_file(write(tmp_path, "model = \n"))


def test_keel_run_agent_file_and_flag_override(tmp_path: Path) -> None:
    write_script(
        tmp_path / "m.json",
        [respond(tool_use("f1", "final_result", n=3), stop="tool_use")],
    )
    path = write(
        tmp_path,
        'model = "scripted:m.json"\n'  # relative to the agent file
        + f'tools = ["{SAMPLE_TOOLS}"]\nmax_cycles = 1\n'
        + 'output_schema = { type = "object", properties = { n = { type = "integer" } } }\n',
    )
    env = keel_env()
    out = keel("run", "--agent", str(path), "--json", "count", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["output"] == {"n": 3}
    # a flag overrides the file: this model gives another result
    other = write_script(
        tmp_path / "o.json",
        [respond(text("seven"), tool_use("f1", "final_result", n=7), stop="tool_use")],
    )
    out = keel(
        "run", "--agent", str(path), "--model", other, "--json", "count", env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["output"] == {"n": 7}
    assert json.loads(out.stdout)["message"]["content"][0]["text"] == "seven"


def test_keel_run_bad_agent_file_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, 'model = "scripted:x.json"\n\ntoken_budget = -4\n')
    out = keel("run", "--agent", str(path), "hi", env=keel_env(), cwd=tmp_path)
    assert out.returncode == 2
    assert "token_budget" in out.stderr and "line 3" in out.stderr


def test_keel_run_sub_agent_approved_through_the_parent(tmp_path: Path) -> None:
    write_script(
        tmp_path / "parent.json",
        [
            respond(tool_use("h1", "helper", prompt="record it"), stop="tool_use"),
            respond(text("the helper said: ok")),
        ],
    )
    write_script(
        tmp_path / "child.json",
        [
            respond(
                tool_use("g1", "guarded_record", path=str(tmp_path / "out"), value="v"),
                stop="tool_use",
            ),
            respond(text("ok")),
        ],
    )
    path = write(
        tmp_path,
        f'model = "scripted:parent.json"\ntools = ["{SAMPLE_TOOLS}"]\n\n'
        f'[agents.helper]\ndescription = "Records things."\nmodel = "scripted:child.json"\n'
        f'tools = ["{SAMPLE_TOOLS}"]\n',
    )
    env = keel_env()
    run = keel(
        "run",
        "--agent",
        str(path),
        "--session",
        "parent",
        "--json",
        "--no-input",
        "go",
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 3, run.stderr
    (interrupt,) = json.loads(run.stdout)["interrupts"]
    assert interrupt["tool_use"]["name"] == "guarded_record"
    pending = keel("pending", "parent", "--json", env=env, cwd=tmp_path)
    assert interrupt["id"] in pending.stdout
    done = keel("approve", "parent", interrupt["id"], "--json", "--no-input", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["message"]["content"][0]["text"] == "the helper said: ok"
    assert (tmp_path / "out").read_text() == "v\n"
    child = keel("show", "parent/helper-h1", "--json", env=env, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["messages"][0]["content"][0]["text"] == "record it"


def test_turn_bounds_from_the_file_and_their_defaults(tmp_path: Path) -> None:
    bounded = load_agent_file(
        write(tmp_path, 'model = "scripted:x"\nmax_cycles = 7\nturn_token_budget = 900\n')
    )
    assert bounded.config.max_cycles_per_turn == 7
    assert bounded.config.max_turn_tokens == 900
    plain = load_agent_file(
        write(tmp_path, 'model = "scripted:x"\n[agents.helper]\ndescription = "d"\n')
    )
    assert plain.config.max_cycles_per_turn == 100  # the defaults, not "no limit"
    assert plain.config.max_turn_tokens == 2_000_000
    assert plain.agents["helper"].config.max_cycles_per_turn == 100


def test_model_retry_from_the_file_and_its_default(tmp_path: Path) -> None:
    bounded = load_agent_file(write(tmp_path, 'model = "scripted:x"\nmodel_retry_s = 30.5\n'))
    assert bounded.config.model_retry_s == 30.5
    plain = load_agent_file(write(tmp_path, 'model = "scripted:x"\n'))
    assert plain.config.model_retry_s == 600  # the default, not "no bound"


def test_a_judge_and_its_criteria_from_the_file(tmp_path: Path) -> None:
    agent = load_agent_file(
        write(
            tmp_path,
            'model = "scripted:x"\njudge = "tests.judges:by_criteria"\n'
            "[judge_criteria.write_file]\n"
            "approve_when = ['path startswith \"docs/\"']\nmin_confidence = 0.9\n",
        )
    )
    assert agent.config.judge == "tests.judges:by_criteria"
    criteria = agent.config.judge_criteria["write_file"]
    assert criteria.approve_when == ['path startswith "docs/"'] and criteria.min_confidence == 0.9


def test_heartbeat_timeout_from_the_file_its_default_and_its_range(tmp_path: Path) -> None:
    cheap = load_agent_file(write(tmp_path, 'model = "scripted:x"\nheartbeat_timeout_s = 30\n'))
    assert cheap.config.heartbeat_timeout_s == 30
    plain = load_agent_file(write(tmp_path, 'model = "scripted:x"\n'))
    assert plain.config.heartbeat_timeout_s is None  # Keel's default, 30 s
    with pytest.raises(AgentFileError, match="heartbeat_timeout_s"):
        load_agent_file(write(tmp_path, 'model = "scripted:x"\nheartbeat_timeout_s = 0.1\n'))
