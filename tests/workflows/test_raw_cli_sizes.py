"""Issue 39's size and path holes, attacked again with the raw ``temporal`` CLI.

``tests/workflows/test_limits.py`` and ``tests/workflows/test_path_tests.py`` send their
attacks through temporalio handles. Here an outsider's own tool sends them: a 1 MB
``always_when`` and a 300 KB prompt by ``temporal workflow update execute --input-file``
(refused, nothing stored), the same decision by ``temporal workflow signal`` (ignored), and a
standing approval on ``docs/`` by raw update that must not cover ``docs/../secret.txt``. The
session then continues-as-new and still answers. Its recording carries the markers of the
input-limits and path-tests patches, so their branches are replayed in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient
from keel.workflows.contracts import Interrupt
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text, tool_use
from tests.helpers.temporal import save_history, temporal_cli
from tests.workflows.test_path_tests import asking

MB = 1_000_000


def sid() -> str:
    return f"rawsz-{uuid.uuid4().hex[:10]}"


async def raw(env: WorkflowEnvironment, kind: str, session: str, name: str, body: Path) -> Any:
    """``temporal workflow update execute`` (or ``signal``) with its input from a file."""
    verb = ["update", "execute"] if kind == "update" else ["signal"]
    return await temporal_cli(
        env, "workflow", *verb, "-w", session, "--name", name, "--input-file", str(body)
    )


def body(tmp_path: Path, value: Any) -> Path:
    path = tmp_path / f"body-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(value))
    return path


async def accepted_updates(keel: KeelClient, session: str) -> tuple[int, int]:
    """The accepted updates in the current run's history, and the history's bytes."""
    history = await keel.client.get_workflow_handle(session).fetch_history()
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    count = sum(1 for e in history.events if e.event_type == accepted)
    return count, sum(e.ByteSize() for e in history.events)


async def next_asking(keel: KeelClient, session: str, decided: str) -> Interrupt:
    """The first pending interrupt other than ``decided``, once one waits."""
    for _ in range(400):
        others = [i for i in (await keel.pending(session)).interrupts if i.id != decided]
        if others:
            return others[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session}: no other interrupt ever waited")


async def test_the_raw_cli_can_neither_wedge_a_session_nor_widen_a_path_test(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    tmp_path: Path,
    temporal_env: WorkflowEnvironment,
) -> None:
    out = tmp_path / "out.txt"

    def call(use_id: str, value: str) -> dict[str, Any]:
        use = tool_use(use_id, "guarded_record", path=str(out), value=value)
        return respond(use, stop="tool_use")

    steps = [
        call("a", "docs/1"),
        call("b", "docs/2"),
        call("c", "docs/../secret.txt"),
        respond(text("done")),
        respond(text("still here")),
    ]
    recording = os.environ.get("KEEL_RECORD_HISTORIES") == "1"
    session = "raw_cli_sizes_and_paths" if recording else sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=script(steps, continue_as_new_events=20))
        [first] = await asking(keel, session, 1)
        before = await accepted_updates(keel, session)
        wedge = {
            "interrupt_id": first.id,
            "decision": "approve",
            "always": True,
            "always_when": [{"field": "value", "op": "startswith", "value": "d" * MB}],
        }
        sent = await raw(temporal_env, "update", session, "decide", body(tmp_path, wedge))
        assert sent.returncode != 0, sent.stdout
        assert "always_when test 1 (value startswith ...) is 1,000,0" in sent.stderr, sent.stderr
        big_prompt = {"content": [{"text": "p" * 300_000}]}
        sent = await raw(temporal_env, "update", session, "prompt", body(tmp_path, big_prompt))
        assert sent.returncode != 0 and "prompt is 300,011 bytes" in sent.stderr, sent.stderr
        count, size = await accepted_updates(keel, session)
        assert count == before[0] and size < before[1] + 10_000  # nothing of it stored
        # a signal over the limit is delivered (Temporal keeps every signal in history) and
        # ignored; 1 KB here, so the recording stays small (1 MB signals: test_limits.py)
        over = {
            **wedge,
            "always_when": [{"field": "value", "op": "startswith", "value": "d" * 1000}],
        }
        sent = await raw(temporal_env, "signal", session, "decide", body(tmp_path, over))
        assert sent.returncode == 0, sent.stderr
        pending: list[Interrupt] = (await keel.pending(session)).interrupts
        assert [i.id for i in pending] == [first.id] and pending[0].status == "pending"
        assert (await keel.pending(session)).standing == []

        # a standing approval on docs/ by raw update: docs/2 runs, docs/../secret.txt asks
        docs = {**wedge, "always_when": [{"field": "value", "op": "startswith", "value": "docs/"}]}
        sent = await raw(temporal_env, "update", session, "decide", body(tmp_path, docs))
        assert sent.returncode == 0, sent.stderr
        escape = await next_asking(keel, session, first.id)
        assert escape.tool_use.input["value"] == "docs/../secret.txt"
        deny = {"interrupt_id": escape.id, "decision": "deny", "reason": "not covered"}
        sent = await raw(temporal_env, "update", session, "decide", body(tmp_path, deny))
        assert sent.returncode == 0, sent.stderr
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=60)
        assert done.status == "completed", done
        after = await keel.run(session, "and now?", timeout_s=60)
        state = await keel.state(session, include_messages=False)
    # replayed in CI: the keel-input-limits and keel-path-tests patches' markers are in it
    await save_history(keel.client, session, "raw_cli_sizes_and_paths")
    assert after.status == "completed", after
    assert state.run > 1, state.run  # it continued-as-new after the attacks, and answers
    assert out.read_text().splitlines() == ["docs/1", "docs/2"]
