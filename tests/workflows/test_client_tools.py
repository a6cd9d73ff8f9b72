"""Client-side tools (``@tool(runs_on="client")``), attacked on a real dev server.

The model calls a tool whose body runs on the user's machine: the session publishes the call
and waits; ``KeelClient.serve_tools`` (or ``keel attach``, a process of its own) runs it there
and delivers the result with the update ``tool_result``. Forged, late and repeated deliveries
go through ``KeelClient`` and the raw ``temporal`` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import tests.client_side_tools  # noqa: F401 - registers the tools: their contracts, their bodies
from keel import ConversationStore, Event, KeelClient, RequestRejected, ToolUse, tool
from keel.activities.tool_run import run_tool
from keel.activities.tools import get_tool
from keel.worker.client.client_tools import ServedCall
from keel.worker.process.assembly import build_worker
from keel.workflows.activity_contracts import ClientOutput, ToolRequest
from keel.workflows.contracts import ClientCall
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import run_histories, save_history, temporal_cli
from tests.workflows.test_session import no_dangling

CLIENT_TOOLS = "tests.client_side_tools"


def sid() -> str:
    return f"ct-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def run_worker(client: Client, task_queue: str, store: ConversationStore) -> RunWorker:
    """A Keel worker that loads the client-side tools too (as contracts: it runs no body)."""

    @asynccontextmanager
    async def _run(**options: Any) -> AsyncIterator[Worker]:
        options.setdefault("max_cached_workflows", 0)  # every task replays: proves determinism
        modules = [SAMPLE_TOOLS, CLIENT_TOOLS]
        async with build_worker(client, task_queue, modules, store=store, **options) as worker:
            yield worker

    return _run


def configured(script: Script, responses: list[dict[str, Any]], **config: Any) -> Any:
    return script(responses, tool_modules=[SAMPLE_TOOLS, CLIENT_TOOLS], **config)


async def waiting_call(keel: KeelClient, session: str, timeout_s: float = 30) -> ClientCall:
    """The first call the session publishes for a client."""
    for _ in range(int(timeout_s / 0.05)):
        calls = await keel.client_calls(session)
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{session} published no client call")


def seen_result(requests: list[dict[str, Any]], use_id: str) -> list[dict[str, Any]]:
    """Every toolResult for ``use_id`` in the last model request: what the model saw."""
    return [
        block["toolResult"]
        for message in requests[-1]["messages"]
        for block in message["content"]
        if "toolResult" in block and block["toolResult"]["toolUseId"] == use_id
    ]


def events_of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type == kind]


async def history_length(keel: KeelClient, session: str) -> int:
    return (await keel.client.get_workflow_handle(session).describe()).history_length


# ------------------------------------------------------------------------------ the contract


def test_a_client_side_tool_is_a_contract_the_worker_never_runs() -> None:
    entry = get_tool("local_forecast")
    assert entry is not None and entry.spec.runs_on == "client"
    assert entry.spec.terms().runs_on == "client"  # what the workflow keeps of the spec
    assert entry.spec.inputSchema["required"] == ["city"]
    echo = get_tool("echo")
    assert echo is None or echo.spec.runs_on == "worker"
    use = ToolUse(toolUseId="t1", name="local_forecast", input={"city": "Oslo"})
    request = ToolRequest(session_id="s", tool_use=use, idempotency_key="s/t1", timeout_s=5)
    refused = asyncio.run(run_tool(request)).result
    assert refused is not None and refused.status == "error"
    assert "runs on the user's machine" in (refused.content[0].text or "")

    def elsewhere() -> None:
        """Runs somewhere else."""

    with pytest.raises(ValueError, match="runs_on is 'worker' or 'client'"):
        tool(runs_on="laptop")(elsewhere)  # type: ignore[call-overload]
    assert get_tool("elsewhere") is None


def test_the_worker_checks_a_delivered_output_against_the_declared_type() -> None:
    use = ToolUse(toolUseId="t1", name="local_forecast", input={"city": "Oslo"})

    def check(output: Any = None, error: str | None = None) -> tuple[str, Any]:
        request = ToolRequest(
            session_id="s",
            tool_use=use,
            idempotency_key="s/t1",
            timeout_s=5,
            client_output=ClientOutput(value=output, error=error),
        )
        result = asyncio.run(run_tool(request)).result
        assert result is not None
        body = result.content[0]
        return result.status, body.text if body.text is not None else body.json_

    assert check({"city": "Oslo", "celsius": 3}) == ("success", {"city": "Oslo", "celsius": 3.0})
    status, why = check({"city": "Oslo", "celsius": "warm"})
    assert status == "error" and "does not match its declared output type Forecast" in why
    status, why = check({"city": "Oslo", "celsius": 3, "rain": "yes"})  # no field the type lacks
    assert status == "success" and why == {"city": "Oslo", "celsius": 3.0}
    assert check(error="disk full") == (
        "error",
        "tool 'local_forecast' failed on the client: disk full",
    )


# ------------------------------------------------------------------------------ runs on a client


async def test_a_client_tool_runs_on_the_attached_client_and_the_model_sees_its_result(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = configured(
        script,
        [
            respond(text("asking the laptop"), tool_use("c1", "local_forecast", city="Oslo"),
                    stop="tool_use"),
            respond(text("21.5 in Oslo")),
        ],
    )  # fmt: skip
    session = sid()
    served: list[ServedCall] = []
    async with run_worker():
        ack = await keel.prompt(session, "weather?", config=config)
        call = await waiting_call(keel, session)
        assert call.tool_use.name == "local_forecast" and call.tool_use.input == {"city": "Oslo"}
        assert call.idempotency_key == f"{session}/c1" and call.status == "waiting"
        state = await keel.state(session)
        assert [c.id for c in state.pending.client_calls] == [call.id]  # in state and pending
        assert state.message_count == 1  # the assistant message is parked (S5)
        assert (await keel.turn(session, ack.turn_id)).status == "running"
        server = asyncio.create_task(
            keel.serve_tools(session, [CLIENT_TOOLS], poll_s=0.2, client="laptop",
                             on_call=served.append)
        )  # fmt: skip
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        server.cancel()
        with suppress(asyncio.CancelledError):
            await server
        state = await keel.state(session)
        assert await keel.client_calls(session) == []
    await save_history(keel.client, session, "client_tool_call")
    assert done.status == "completed", done
    [result] = seen_result(model_log(), "c1")
    assert result["status"] == "success"
    assert result["content"] == [{"json": {"city": "Oslo", "celsius": 21.5}}]
    [one] = served
    assert one.ack is not None and one.ack.status == "delivered" and not one.ack.repeated
    [received] = events_of(state.events, "client_result_received")
    assert received.detail["client"] == "laptop" and received.detail["tool_use_id"] == "c1"
    kinds = [e.type for e in state.events]
    assert kinds.index("client_call_published") < kinds.index("client_result_received")
    assert kinds.index("client_result_received") < kinds.index("tool_finished")
    no_dangling(state.messages)


async def test_keel_attach_runs_it_and_a_restarted_client_completes_the_call_once(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    model_log: Any,
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
) -> None:
    out = tmp_path / "local.txt"
    hold = Path(f"{out}.hold")
    started = Path(f"{out}.started")
    hold.write_text("")  # the tool waits on the client while this exists
    config = configured(
        script,
        [
            respond(tool_use("a1", "append_local", path=str(out), value="once"), stop="tool_use"),
            respond(text("appended")),
        ],
    )
    env = keel_env(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        KEEL_TASK_QUEUE=task_queue,
        KEEL_HOME=str(tmp_path / "home"),
    )
    session = sid()
    attach = [sys.executable, "-m", "keel.worker.cli", "attach", session, "--tools", CLIENT_TOOLS,
              "--poll", "0.1", "--json"]  # fmt: skip

    async with run_worker():
        ack = await keel.prompt(session, "append", config=config)
        call = await waiting_call(keel, session)
        first = await asyncio.create_subprocess_exec(
            *attach, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        for _ in range(600):  # the attached client runs the tool: kill it mid-run
            if started.exists():
                break
            await asyncio.sleep(0.05)
        assert started.exists(), (await first.communicate())[1].decode()
        first.send_signal(signal.SIGKILL)
        await first.wait()
        await asyncio.sleep(0.5)
        assert [c.id for c in await keel.client_calls(session)] == [call.id]  # still waiting
        assert (await keel.turn(session, ack.turn_id)).status == "running"
        hold.unlink()
        second = await asyncio.create_subprocess_exec(
            *attach, "--once", env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(second.communicate(), timeout=60)
        assert second.returncode == 0, stderr.decode()
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed", done
    [line] = [json.loads(x) for x in stdout.decode().splitlines()]
    assert line["call"] == call.id and line["status"] == "delivered" and line["error"] is None
    assert f"attached to {session}" in stderr.decode()
    # the tool ran twice on the user's machine (the first run was killed) ...
    runs = started.read_text().splitlines()
    assert len(runs) == 2 and all(r.endswith(f" {session}/a1") for r in runs)
    assert str(os.getpid()) not in {r.split()[0] for r in runs}  # ... never in the worker
    # ... and its result counts once
    assert out.read_text().splitlines() == ["once"]
    assert len(events_of(state.events, "client_result_received")) == 1
    [result] = seen_result(model_log(), "a1")
    assert result["status"] == "success" and result["content"] == [{"json": 1}]
    no_dangling(state.messages)


# ------------------------------------------------------------------------------ forged results


async def test_forged_results_are_refused_and_change_nothing(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    model_log: Any,
    temporal_env: WorkflowEnvironment,
) -> None:
    def forecast(use_id: str) -> Any:
        return configured(
            script,
            [
                respond(tool_use(use_id, "local_forecast", city="Oslo"), stop="tool_use"),
                respond(text("done")),
            ],
        )

    mine, theirs = sid(), sid()
    async with run_worker():
        ack = await keel.prompt(mine, "go", config=forecast("c1"))
        await keel.prompt(theirs, "go", config=forecast("c1"))  # the same toolUseId
        call = await waiting_call(keel, mine)
        other = await waiting_call(keel, theirs)
        before = await history_length(keel, mine)
        good = {"city": "Oslo", "celsius": 1.0}
        with pytest.raises(RequestRejected, match="unknown client call id 'made-up'"):
            await keel.tool_result(mine, "made-up", call.idempotency_key, output=good)
        # another session's call: its id is unknown here, and its key is not this call's
        with pytest.raises(RequestRejected, match="unknown client call id"):
            await keel.tool_result(mine, other.id, other.idempotency_key, output=good)
        with pytest.raises(RequestRejected, match="is not that of client call"):
            await keel.tool_result(mine, call.id, other.idempotency_key, output=good)
        with pytest.raises(RequestRejected, match="is not that of client call"):
            await keel.tool_result(mine, call.id, f"{mine}/other-use", output=good)
        # a result that claims what the workflow decides (a toolUseId, a status): no such field
        forged = {"call_id": call.id, "idempotency_key": call.idempotency_key, "output": good,
                  "toolUseId": "c2", "status": "success"}  # fmt: skip
        raw = await temporal_cli(
            temporal_env, "workflow", "update", "execute", "-w", mine, "--name", "tool_result",
            "--input", json.dumps(forged),
        )  # fmt: skip
        assert raw.returncode != 0 and "extra" in raw.stderr.lower(), raw.stderr
        raw = await temporal_cli(
            temporal_env, "workflow", "update", "execute", "-w", mine, "--name", "tool_result",
            "--input", json.dumps({"call_id": other.id, "idempotency_key": other.idempotency_key,
                                   "output": good}),
        )  # fmt: skip
        assert raw.returncode != 0 and "unknown client call id" in raw.stderr, raw.stderr
        # nothing was written, nothing changed: the call still waits for its own client
        assert await history_length(keel, mine) == before
        assert [c.id for c in await keel.client_calls(mine)] == [call.id]
        assert [c.id for c in await keel.client_calls(theirs)] == [other.id]
        delivered = await keel.tool_result(mine, call.id, call.idempotency_key, output=good)
        assert delivered.status == "delivered" and delivered.tool_use_id == "c1"
        done = await keel.wait_turn(mine, ack.turn_id, timeout_s=30)
        state = await keel.state(mine)
        assert [c.id for c in await keel.client_calls(theirs)] == [other.id]
    assert done.status == "completed"
    [result] = seen_result(model_log(), "c1")
    assert result["content"] == [{"json": good}]
    assert len(events_of(state.events, "client_result_received")) == 1


async def test_a_repeated_delivery_is_answered_again_and_applied_once(
    keel: KeelClient,
    run_worker: RunWorker,
    script: Script,
    model_log: Any,
    temporal_env: WorkflowEnvironment,
) -> None:
    config = configured(
        script,
        [
            respond(tool_use("c1", "local_forecast", city="Rome"), stop="tool_use"),
            respond(text("done")),
        ],
    )
    session = sid()
    result = {"city": "Rome", "celsius": 30.0}
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        call = await waiting_call(keel, session)
        key = call.idempotency_key
        first = await keel.tool_result(session, call.id, key, output=result, client="one")
        # the same delivery again (same update id, the idempotency key): the first answer
        again = await keel.tool_result(session, call.id, key, output=result, client="one")
        # the same result sent as another update (a client that restarted): answered, not applied
        other = await keel.tool_result(session, call.id, key, output=result, update_id="u-2")
        raw = await temporal_cli(
            temporal_env, "workflow", "update", "execute", "-w", session, "--name",
            "tool_result", "--input",
            json.dumps({"call_id": call.id, "idempotency_key": key, "output": result}),
            "--output", "json",
        )  # fmt: skip
        assert raw.returncode == 0, raw.stderr
        answered = json.loads(raw.stdout)["result"]
        assert answered["call_id"] == call.id and answered["repeated"] is True
        # another result for the same call: as the same update, the first answer; else refused
        changed = {"city": "Rome", "celsius": -5.0}
        assert await keel.tool_result(session, call.id, key, output=changed) == first
        with pytest.raises(RequestRejected, match="takes no other result"):
            await keel.tool_result(session, call.id, key, output=changed, update_id="u-4")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        after = await keel.tool_result(session, call.id, key, output=result, update_id="u-3")
        state = await keel.state(session)
    await save_history(keel.client, session, "client_tool_repeated_delivery")
    assert done.status == "completed"
    assert first.status == "delivered" and not first.repeated
    assert again == first
    assert other.repeated and other.call_id == call.id
    assert after.repeated and after.status == "done"
    assert len(events_of(state.events, "client_result_received")) == 1
    [seen] = seen_result(model_log(), "c1")
    assert seen["content"] == [{"json": result}]
    assert len(model_log()) == 2


# ------------------------------------------------------------------------------ what the model gets


async def test_a_call_no_client_runs_times_out_into_an_error_for_the_model(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = configured(
        script,
        [
            respond(tool_use("u1", "unattended", question="anyone?"), stop="tool_use"),
            respond(text("nobody answered")),
        ],
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
        [published] = events_of(state.events, "client_call_published")
        with pytest.raises(RequestRejected, match="is timed_out"):
            await keel.tool_result(
                session, published.detail["id"], f"{session}/u1", output="too late"
            )
    await save_history(keel.client, session, "client_tool_timeout")
    assert done.status == "completed"
    [result] = seen_result(model_log(), "u1")
    assert result["status"] == "error"
    assert result["content"][0]["text"].startswith("no client ran tool 'unattended' within 2 s")
    no_dangling(state.messages)


async def test_a_result_that_breaks_the_declared_type_or_a_failure_is_an_error_result(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = configured(
        script,
        [
            respond(
                tool_use("bad", "local_forecast", city="Oslo"),
                tool_use("w1", "wrong", n=3),
                stop="tool_use",
            ),
            respond(text("noted")),
        ],
    )
    session = sid()
    served: list[ServedCall] = []
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        for _ in range(600):
            calls = {c.tool_use.toolUseId: c for c in await keel.client_calls(session)}
            if len(calls) == 2:
                break
            await asyncio.sleep(0.05)
        bad = calls["bad"]
        # a raw client sends what the declared type refuses: accepted, then checked
        taken = await keel.tool_result(
            session, bad.id, bad.idempotency_key, output={"city": "Oslo", "celsius": "warm"}
        )
        assert taken.status == "delivered"
        # the client's own tool returns text for an int: the client says it failed
        n = await keel.serve_tools(
            session, [CLIENT_TOOLS], poll_s=0.2, stop_after=1, on_call=served.append
        )
        assert n == 1
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
    assert done.status == "completed"
    [invalid] = seen_result(model_log(), "bad")
    assert invalid["status"] == "error"
    assert "does not match its declared output type Forecast" in invalid["content"][0]["text"]
    [failed] = seen_result(model_log(), "w1")
    assert failed["status"] == "error"
    assert failed["content"][0]["text"].startswith("tool 'wrong' failed on the client: returned")
    assert served[0].error is not None and "declared output type" in served[0].error


async def test_a_gated_client_tool_is_published_only_once_approved(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("on the laptop")
    config = configured(
        script,
        [
            respond(tool_use("g1", "guarded_local", path=str(secret)), stop="tool_use"),
            respond(tool_use("g2", "guarded_local", path=str(secret)), stop="tool_use"),
            respond(text("done")),
        ],
    )
    session = sid()
    async with run_worker():
        waiting = await keel.run(session, "read", config=config, timeout_s=30)
        assert waiting.status == "awaiting_human"
        assert await keel.client_calls(session) == []  # nothing to run before a person decides
        await keel.decide(session, waiting.interrupts[0].id, "deny", reason="not that file")
        second = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        assert second.status == "awaiting_human"
        assert await keel.client_calls(session) == []
        await keel.decide(session, second.interrupts[0].id, "approve")
        call = await waiting_call(keel, session)
        assert call.tool_use.toolUseId == "g2"
        await keel.serve_tools(session, [CLIENT_TOOLS], poll_s=0.2, stop_after=1)
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed"
    assert [e.detail["tool_use_id"] for e in events_of(state.events, "client_call_published")] == [
        "g2"
    ]
    [result] = seen_result(model_log(), "g2")
    assert result["content"] == [{"text": "on the laptop"}]


async def test_a_cancelled_turn_ends_its_client_call(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = configured(
        script,
        [respond(tool_use("c1", "local_forecast", city="Oslo"), stop="tool_use")],
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        call = await waiting_call(keel, session)
        await keel.cancel(session, "changed my mind")
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        with pytest.raises(RequestRejected, match="is cancelled"):
            await keel.tool_result(session, call.id, call.idempotency_key, output={})
        state = await keel.state(session)
    assert done.status == "cancelled"
    assert len(events_of(state.events, "client_call_published")) == 1
    no_dangling(state.messages)
    assert len(model_log()) == 1  # the model was not called again


# ------------------------------------------------------------------------------ durability


async def test_a_waiting_call_survives_continue_as_new_and_a_worker_restart(
    keel: KeelClient, run_worker: RunWorker, script: Script, model_log: Any
) -> None:
    config = configured(
        script,
        [
            respond(tool_use("e1", "echo", text="warm up"), stop="tool_use"),
            respond(
                tool_use("free", "echo", text="runs at once"),
                tool_use("c1", "local_forecast", city="Lima"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
        continue_as_new_events=20,
    )
    session = sid()
    async with run_worker():
        ack = await keel.prompt(session, "go", config=config)
        call = await waiting_call(keel, session)
        for _ in range(200):  # the session moves to a new run while only a client is awaited
            if (await keel.state(session, include_messages=False)).run > 1:
                break
            await asyncio.sleep(0.05)
        parked = await keel.state(session)
        assert parked.run > 1 and parked.pending.message is not None
    # no worker now; then another one: the call waits under the same id
    async with run_worker():
        [again] = await keel.client_calls(session)
        assert again.id == call.id and again.idempotency_key == call.idempotency_key
        served = await keel.serve_tools(session, [CLIENT_TOOLS], poll_s=0.2, stop_after=1)
        done = await keel.wait_turn(session, ack.turn_id, timeout_s=30)
        state = await keel.state(session)
    await save_history(keel.client, session, "client_tool_across_continue_as_new")
    assert served == 1 and done.status == "completed"
    assert len(await run_histories(keel.client, session)) >= 2
    [result] = seen_result(model_log(), "c1")
    assert result["content"] == [{"json": {"city": "Lima", "celsius": 21.5}}]
    [free] = seen_result(model_log(), "free")
    assert free["status"] == "success"
    no_dangling(state.messages)
