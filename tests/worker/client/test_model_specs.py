"""KeelClient refuses a model spec its provider would refuse, before starting anything."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from temporalio.service import RPCError, RPCStatusCode

from keel import KeelClient, RequestRejected, SessionConfig
from keel.activities.models import (
    PROVIDER_CLASSES,
    ModelSpecError,
    check_model_spec,
    path_prefixes,
    telemetry_name,
)
from keel.workflows.contracts import SubAgent
from tests.helpers.cli import ROOT, keel_env


async def not_started(keel: KeelClient, session: str) -> None:
    with pytest.raises(RPCError) as missing:
        await keel.client.get_workflow_handle(session).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.parametrize("method", ["prompt", "start"])
async def test_keel_client_rejects_a_bad_option_before_starting(
    keel: KeelClient, method: str
) -> None:
    session = f"s-spec-{uuid.uuid4().hex[:8]}"
    config = SessionConfig(model="openai:llama3?timeout=abc")
    with pytest.raises(RequestRejected) as caught:
        await getattr(keel, method)(session, "hi", config=config)
    assert str(caught.value) == (
        "model: option timeout of openai takes a number of seconds > 0, got 'abc'"
    )
    assert caught.value.kind == "ModelSpecError"
    await not_started(keel, session)


async def test_keel_client_checks_sub_agents_and_judge_models(keel: KeelClient) -> None:
    session = f"s-spec-{uuid.uuid4().hex[:8]}"
    child = SessionConfig(model="scripted:x.json", judge_model="nosuch:judge")
    config = SessionConfig(
        model="scripted:x.json",
        agents={"helper": SubAgent(description="d", config=child)},
    )
    with pytest.raises(RequestRejected, match="^sub-agent helper: judge_model: unknown model"):
        await keel.start(session, "hi", config=config)
    await not_started(keel, session)


def test_every_option_of_every_provider_names_what_it_takes() -> None:
    for cls in PROVIDER_CLASSES:
        for option in cls.options:
            with pytest.raises(ModelSpecError, match=f"option {option.name} of {cls.prefix}"):
                check_model_spec(f"{cls.prefix}:m?{option.name}=%00not-a-value")
    assert check_model_spec("openai:llama3.2:3b?timeout=5&stream=false").values == {
        "timeout": 5.0,
        "stream": False,
    }
    # a path spec takes no options: a path may hold "?"
    assert check_model_spec("scripted:odd?name.json").name == "odd?name.json"
    assert path_prefixes() == {"scripted"}
    assert telemetry_name("bedrock:m") == "aws.bedrock" and telemetry_name("x:y") == "x"


def test_checking_a_spec_imports_no_boto3() -> None:
    code = (
        "import sys\n"
        "from keel.activities.models import check_model_spec\n"
        "check_model_spec('bedrock:m?region=eu-west-1')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=keel_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
