"""A model spec is checked before anything starts: exit 2 naming the option, no .keel/, no session.

``keel run`` without a Temporal of its own would create ``.keel/`` and start one (embedded
mode); with one (``TEMPORAL_ADDRESS``) it would start a session. A spec its provider refuses
(an unknown provider, an unknown option, a value it does not take) stops it before either.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from tests.helpers.cli import keel, keel_env

BAD_SPECS = [
    (
        "openai:llama3?timeout=abc",
        "keel: --model: option timeout of openai takes a number of seconds > 0, got 'abc'",
    ),
    (
        "openai:llama3?context_tokens=12",
        "keel: --model: option context_tokens of openai takes a whole number of tokens >= 256, "
        "got '12'",
    ),
    (
        "openai:llama3?tool_choice=any",
        "keel: --model: option tool_choice of openai takes auto or omit, got 'any'",
    ),
    (
        "openai:llama3?colour=red",
        "keel: --model: openai has no option 'colour'; its options: stream, timeout, "
        "tool_choice, context_tokens",
    ),
    (
        "bedrock:anthropic.claude?stream=maybe",
        "keel: --model: option stream of bedrock takes true or false, got 'maybe'",
    ),
    (
        "bedrock:?region=eu-west-1",
        "keel: --model: bedrock model spec needs a model: bedrock:<model-id>",
    ),
    (
        "gpt5:turbo",
        "keel: --model: unknown model spec 'gpt5:turbo'; expected one of bedrock:<model-id>, "
        "openai:<model>, scripted:<path.json>",
    ),
]


@pytest.mark.parametrize(("spec", "said"), BAD_SPECS)
def test_keel_run_refuses_a_bad_spec_before_creating_keel_dir(
    tmp_path: Path, spec: str, said: str
) -> None:
    done = keel("run", "--model", spec, "hi", env=keel_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == said
    assert not (tmp_path / ".keel").exists()
    assert list(tmp_path.iterdir()) == []


def test_keel_model_from_the_environment_is_named_so(tmp_path: Path) -> None:
    env = keel_env(KEEL_MODEL="openai:llama3?stream=perhaps")
    done = keel("run", "hi", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "keel: KEEL_MODEL: option stream of openai takes true or false, got 'perhaps'"
    )
    assert not (tmp_path / ".keel").exists()


def test_keel_schedule_create_refuses_a_bad_spec(tmp_path: Path) -> None:
    done = keel(
        "schedule",
        "create",
        "nightly",
        "--every",
        "1h",
        "--model",
        "openai:m?timeout=-1",
        "hi",
        env=keel_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--model: option timeout of openai takes a number of seconds > 0, got '-1'" in (
        done.stderr
    )
    assert not (tmp_path / ".keel").exists()


async def test_with_a_temporal_no_session_is_started(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    session = f"s-spec-{uuid.uuid4().hex[:8]}"
    done = keel(
        "run",
        "--session",
        session,
        "--model",
        "openai:llama3?timeout=abc",
        "hi",
        env=server_env,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "option timeout of openai takes a number of seconds > 0, got 'abc'" in done.stderr
    with pytest.raises(RPCError) as missing:
        await temporal_env.client.get_workflow_handle(session).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
    assert not (tmp_path / ".keel").exists()


def test_a_good_spec_with_a_missing_file_is_still_caught_by_the_preflight(tmp_path: Path) -> None:
    done = keel("run", "--model", "scripted:none.json", "hi", env=keel_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert "scripted model file 'none.json' not found" in done.stderr
