"""The session's state is one model, ``Ledger``: every field survives continue-as-new.

Two proofs. Through the data converter: a ledger with every field set survives the payload
that continue-as-new sends. On a dev server: a session made to continue-as-new while a turn
waits for approval, with guidance, a queued prompt and a closing request, has the same ledger
in its next run. And the workflow holds no state beside the ledger but what is in flight.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from keel import (
    AgentSession,
    ContentBlock,
    Event,
    Interrupt,
    KeelClient,
    Message,
    SessionConfig,
    TokenUsage,
    ToolUse,
    TurnRecord,
    text_block,
)
from keel.activities.model_call import ModelActivities
from keel.activities.tool_run import ToolActivities
from keel.activities.tools import load_tool_modules
from keel.worker.payloads import DATA_CONVERTER
from keel.workflows.contracts import (
    ClientCall,
    Condition,
    Notification,
    PrefixRef,
    StandingApproval,
    ToolSpec,
)
from keel.workflows.cost import Spend
from keel.workflows.effect_contracts import EffectAttempt, EffectRecord
from keel.workflows.ledger import Ledger, PendingCycle, QueuedPrompt, SessionInput
from keel.workflows.messages import error_result
from keel.workflows.raw_inputs import RawInput
from keel.workflows.replay_contracts import Divergence, ReplayProgress
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use

# What AgentSession may hold beside its ledger: its configuration, a start error, and what is
# in flight within one run (activity handles, signals held for one workflow task, running
# sub-agent children, the children to ask and the decisions being handed to them, and
# decisions not yet forwarded: no run continues-as-new while a child runs; the tool uses of the
# running cycle, stopped when Temporal cancels the session), and the tasks
# delivering notifications (their notifications are in the ledger).
RUN_LOCAL = {
    "_config",
    "_ledger",
    "_init_error",
    "_model_call",
    "_tool_tasks",
    "_continuing",
    # KeelStatus as last upserted: each run starts from its own start's search attributes
    "_status",
    "_status._shown",
    "_status._force",
    # the parts (each holds the configuration, the ledger, and other parts it works with)
    "_answers",
    "_answers._ledger",
    # the wait_turn updates waiting in this run: answered before it continues as new
    "_turn_waits",
    "_turn_waits._ledger",
    "_turn_waits.waiting",
    "_turn_waits.handing_over",
    "_requests",
    "_requests._config",
    "_requests._ledger",
    "_requests._answers",
    "_requests._init_error",
    "_notifier",
    "_notifier._config",
    "_notifier._ledger",
    "_notifier._deliveries",
    "_sub_agents",
    "_sub_agents._config",
    "_sub_agents._ledger",
    "_sub_agents._notifier",
    "_sub_agents.children",
    "_sub_agents._report_due",
    "_sub_agents.handing_on",
    "_sub_agents._forward",
    "_sub_agents.show_details",  # the session's, to show a child's interrupts
    "_decisions",
    "_decisions._config",
    "_decisions._ledger",
    "_decisions._answers",
    "_decisions._sub_agents",
    "_decisions._held",
    "_budgets",
    "_budgets._config",
    "_budgets._ledger",
    "_gate",
    "_gate._config",
    "_gate._ledger",
    "_gate._notifier",
    "_gate._sub_agents",
    "_gate._decisions",
    "_gate._show_details",
    "_gate.tool_calls",
    "_gate.client_tools",  # its calls are in the ledger, its checks are tool activities
    "_gate.effects",  # its records are in the ledger
    "_gate.replay",  # its progress is in the ledger (Ledger.replay); its plan in the config
}


def every_field_set() -> Ledger:
    use = ToolUse(toolUseId="u1", name="guarded_record", input={"path": "p"})
    assistant = Message(role="assistant", content=[ContentBlock(toolUse=use)])
    turn = TurnRecord(turn_id=3, status="awaiting_human", cycles=2, stop_reason="tool_use")
    return Ledger(
        run=4,
        stored=PrefixRef(digest="d" * 64, count=7),
        messages=[Message(role="user", content=[text_block("unstored")])],
        result_refs={"u0": "r" * 64},
        tool_use_ids={"u0", "u1"},
        turns={3: turn, 4: TurnRecord(turn_id=4)},
        interrupts={"i1": Interrupt(id="i1", tool_use=use, name="guarded", reason="r", turn=3)},
        usage=TokenUsage(inputTokens=5, outputTokens=6, totalTokens=11),
        event_seq=9,
        events=[Event(seq=9, type="interrupt_created", at="2026-01-01T00:00:00+00:00", turn=3)],
        queue=[QueuedPrompt(turn_id=4, content=[text_block("next")])],
        current_turn=3,
        cycle=PendingCycle(
            turn_id=3,
            cycle=2,
            message=assistant,
            results={"u9": error_result("u9", "no")},
            digests={"u9": "x" * 64},
            answers={"u1": {"q": 1}},
        ),
        tools=[ToolSpec(name="guarded_record", description="", inputSchema={})],
        tools_digest="t" * 64,
        steering=["left, not right"],
        cancel_reason="stop",
        closing=True,
        closed=True,
        prompt_updates={"up-1": 4},
        update_acks={"steer/up-2": '{"turn_id":3}'},
        single_turn=True,
        parent_session="parent-1",
        ancestors=["parent-1", "root-1"],
        standing={
            "guarded_record": StandingApproval(
                tool="guarded_record",
                when=[Condition(field="path", op="startswith", value="docs/")],
                granted_by="ann",
                interrupt_id="i-1",
                turn=1,
            )
        },
        mirrored={"i-child": "parent-1/helper-t1"},
        effects={
            "u1": EffectRecord(
                tool="guarded_record",
                tool_use_id="u1",
                idempotency_key="s/u1",
                effect="write",
                turn=3,
                attempts=[EffectAttempt(attempt=1, started_at="2026-01-01T00:00:00+00:00")],
                outcome="resolved",
                decided_by="ann",
                interrupt_id="i-1",
            )
        },
        effects_dropped=2,
        prompt_at={1: (0, 0), 3: (4, 1)},
        cost_usd=0.25,
        cost_unknown=True,
        sub_agents={
            "researcher": Spend(
                usage=TokenUsage(inputTokens=5, outputTokens=7, totalTokens=12),
                cost_usd=0.01,
            )
        },
        budgets={"session_tokens": 5_000, "session_cost": 2.5},
        replay=ReplayProgress(
            matched={3: [0]},
            calls={3: 2},
            live=["u7"],
            divergence=Divergence(turn=3, index=1, replayed=use),
        ),
        client_calls={
            "c1": ClientCall(
                id="c1",
                tool_use=use,
                idempotency_key="s/u1",
                turn=3,
                cycle=2,
                timeout_s=60,
                expires_at="2026-01-01T00:01:00+00:00",
                status="delivered",
                result_digest="h" * 64,
                output={"a": 1},
            )
        },
        outbox=[
            Notification(key="s/turn/2#0", url="https://hooks.example/k", event={"id": "s/turn/2"})
        ],
    )


def test_the_sample_sets_every_field() -> None:
    sample, default = every_field_set(), Ledger()
    unset = [n for n in Ledger.model_fields if getattr(sample, n) == getattr(default, n)]
    assert unset == [], f"give these Ledger fields a value in every_field_set(): {unset}"


def test_every_field_survives_the_continue_as_new_payload() -> None:
    ledger = every_field_set()
    carried = ledger.for_next_run()
    start = SessionInput(config=SessionConfig(model="scripted:x.json"), carried=carried)
    converter = DATA_CONVERTER.payload_converter
    [back] = converter.from_payloads(converter.to_payloads([start]), [SessionInput])
    assert back.carried is not None
    for name in Ledger.model_fields:
        expected = ledger.run + 1 if name == "run" else getattr(ledger, name)
        assert getattr(back.carried, name) == expected, name


def test_the_next_run_keeps_live_state_and_only_the_recent_past() -> None:
    ledger = every_field_set()
    for n in range(5, 80):  # old, ended turns and events beyond what is carried
        ledger.turns[n] = TurnRecord(turn_id=n, status="completed")
        ledger.events.append(Event(seq=n + 10, type="turn_ended", at="t", turn=n))
    carried = ledger.for_next_run()
    assert {3, 4} <= set(carried.turns)  # the running and the queued turn stay, however old
    assert len(carried.turns) <= 2 + 20 and max(carried.turns) == 79
    assert len(carried.events) == 50 and carried.events[-1] == ledger.events[-1]
    assert carried.interrupts == ledger.interrupts  # a pending interrupt always travels


@workflow.defn(name="AgentSession", sandboxed=False)
class ProbedSession(AgentSession):
    """AgentSession with a query for its ledger and attributes, and a continue-as-new lever."""

    @workflow.run
    async def run(self, input: RawInput[SessionInput | None] = None) -> Any:
        return await super().run(input)

    def _history_full(self) -> bool:
        return getattr(self, "_pull_lever", False) or super()._history_full()

    @workflow.signal
    def lever(self) -> None:
        self._pull_lever = True

    @workflow.query
    def ledger(self) -> Ledger:
        return self._ledger

    @workflow.query
    def attributes(self) -> list[str]:
        """What the session holds, and what each of its parts holds."""
        names = []
        for name, value in vars(self).items():
            if name == "_pull_lever":
                continue
            names.append(name)
            part = type(value).__module__.startswith("keel.workflows.")
            if part and not isinstance(value, BaseModel):
                names += [f"{name}.{inner}" for inner in vars(value)]
        return sorted(names)


async def test_a_real_continue_as_new_carries_the_whole_ledger(
    client: Client, task_queue: str, store: Any, script: Script
) -> None:
    asked = tool_use("g1", "guarded_record", path="/nonexistent/never", value="v")
    config = script([respond(text("first")), respond(asked, stop="tool_use"), respond(text("ok"))])
    keel = KeelClient(client, task_queue, store)
    session = f"ledger-{uuid.uuid4().hex[:10]}"
    load_tool_modules([SAMPLE_TOOLS])
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[ProbedSession],
        activities=[ModelActivities(store).converse, ToolActivities(store).run],
        activity_executor=ThreadPoolExecutor(4),
        max_cached_workflows=0,
    )
    async with worker:
        await keel.run(session, "one", config=config, timeout_s=30)
        waiting = await keel.run(session, "two", timeout_s=30)
        assert waiting.status == "awaiting_human"
        await keel.steer(session, "mind the gap")
        await keel.prompt(session, "three")
        await keel.close(session)
        handle = client.get_workflow_handle(session)
        assert set(await handle.query(ProbedSession.attributes)) == RUN_LOCAL
        before: Ledger = await handle.query(ProbedSession.ledger)
        assert before.run == 1 and before.closing and before.queue and before.steering
        assert before.cycle is not None and before.stored is not None and before.tools_digest
        await handle.signal(ProbedSession.lever)
        for _ in range(100):
            after: Ledger = await handle.query(ProbedSession.ledger)
            if after.run == 2:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the session did not continue-as-new")
        assert set(await handle.query(ProbedSession.attributes)) == RUN_LOCAL
        for name in Ledger.model_fields:
            if name == "run":
                continue
            if name in ("events", "event_seq"):
                continue  # one more event: run_continued
            assert getattr(after, name) == getattr(before, name), name
        assert after.events[: len(before.events)] == before.events
        assert [e.type for e in after.events[len(before.events) :]] == ["run_continued"]
        # and the session carries on from there: deny, then the queued turn runs
        [interrupt] = after.pending_view().interrupts
        await keel.decide(session, interrupt.id, "deny", reason="no")
        done = await keel.wait_turn(session, waiting.turn_id, timeout_s=30)
        assert done.status == "completed"
