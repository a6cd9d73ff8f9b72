"""``keel resolve`` and ``keel effects``, driven as a user does, in ``keel`` processes.

Argument errors need no server. The last test runs a real AgentSession whose write tool's
attempt ended without a result; the others run a stand-in session on a real Temporal
(``tests/fakes/outcome_unknown_session.py``: the contract's queries and ``decide`` update, with
Keel's checks), to reach outputs a real session makes rarely. The worker runs in this test's
event loop while ``keel`` runs in a thread.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keel.worker.signing import generate_key
from keel.workflows.contracts import Decision, SessionConfig
from tests.helpers.cli import keel, keel_env
from tests.helpers.outcome_unknown import (
    RETRIED,
    outcome_unknown,
    records,
    retried_event,
    stand_in_worker,
    start_stand_in,
)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_resolve_takes_exactly_one_result_and_names_a_file_it_cannot_use(
    tmp_path: Path,
) -> None:
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\xff\xfe")
    (tmp_path / "big.txt").write_text("r" * 64_001)
    (tmp_path / "ok.txt").write_text("refunded")
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.txt").write_text("\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    env = keel_env()  # no Temporal known: nothing may be started, or looked for
    cases = [
        ([], "keel resolve: one of the arguments --result --result-file is required"),
        (
            ["--result", "x", "--result-file", "ok.txt"],
            "keel resolve: argument --result-file: not allowed with argument --result",
        ),
        (["--result-file", "missing.txt"], "keel: --result-file missing.txt: cannot read "),
        (["--result-file", "folder"], "keel: --result-file folder: cannot read "),
        (["--result-file", "binary.txt"], "keel: --result-file binary.txt: not UTF-8 text"),
        (
            ["--result-file", "big.txt"],
            "keel: --result-file big.txt: the file is over the limit of 64,000 bytes",
        ),
        (["--result", "r" * 64_001], "keel: resolved result is 64,001 bytes, over the limit"),
        (["--result", " \n"], "keel: --result is blank: give the tool's result"),
        (["--result-file", "empty.txt"], "keel: --result-file empty.txt: the file is blank"),
    ]
    for flags, said in cases:
        done = keel("resolve", "s1", "ou-1", *flags, env=env, cwd=tmp_path)
        assert done.returncode == 2, (flags, done.stderr)
        assert one_line(done).startswith(said), (flags, done.stderr)
        assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def run(
    *args: str, env: dict[str, str], cwd: Path
) -> asyncio.Future[subprocess.CompletedProcess[str]]:
    """``keel ARGS`` in a thread, so the stand-in's worker in this loop keeps answering."""
    return asyncio.ensure_future(asyncio.to_thread(keel, *args, env=env, cwd=cwd))


async def test_resolve_is_offered_signed_and_refused_as_approve_is(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client: Client = temporal_env.client
    queue = server_env["KEEL_TASK_QUEUE"]
    session = f"cli-ou-{uuid.uuid4().hex[:8]}"
    public = generate_key(tmp_path / "ana.key")
    generate_key(tmp_path / "bob.key")
    config = SessionConfig(model="scripted:x.json", approver_keys={"ana": public})
    (tmp_path / "result.txt").write_text("refund 7 went through: ref R-123\n")
    env = server_env
    async with stand_in_worker(client, queue):
        handle = await start_stand_in(client, queue, session, config, [outcome_unknown()])
        try:
            listed = await run("pending", session, env=env, cwd=tmp_path)
            assert listed.returncode == 0, listed.stderr
            lines = [line.strip() for line in listed.stdout.splitlines()]
            assert lines[0].startswith("outcome unknown: tool 'refund' may have run")
            assert lines[-3:] == [
                f"keel approve {session} ou-1",
                f"keel deny {session} ou-1 --reason '...'",
                f"keel resolve {session} ou-1 --result '...'",
            ]

            signs = ["--approver", "ana", "--json", "--no-input"]
            wrong = await run(
                "resolve",
                session,
                "ou-1",
                "--result",
                "x",
                "--key",
                "bob.key",
                *signs,
                env=env,
                cwd=tmp_path,
            )
            assert wrong.returncode == 2
            assert "the decision by 'ana' is refused" in one_line(wrong)
            unknown = await run(
                "resolve",
                session,
                "nope",
                "--result",
                "x",
                "--key",
                "ana.key",
                *signs,
                env=env,
                cwd=tmp_path,
            )
            assert unknown.returncode == 2
            assert "unknown interrupt id 'nope'; pending: ou-1" in one_line(unknown)
            assert await handle.query("decisions", result_type=list[Decision]) == []

            done = await run(
                "resolve",
                session,
                "ou-1",
                "--result-file",
                "result.txt",
                "--key",
                "ana.key",
                "--reason",
                "seen in the bank",
                *signs,
                env=env,
                cwd=tmp_path,
            )
            assert done.returncode == 0, done.stderr
            turn = json.loads(done.stdout)
            assert (turn["session"], turn["turn"], turn["status"]) == (session, 1, "completed")
            [taken] = await handle.query("decisions", result_type=list[Decision])
            assert taken.result == "refund 7 went through: ref R-123\n"  # the file, as it is
            assert (taken.decision, taken.approver, taken.reason) == (
                "resolve",
                "ana",
                "seen in the bank",
            )

            again = await run(
                "resolve",
                session,
                "ou-1",
                "--result",
                "x",
                "--key",
                "ana.key",
                *signs,
                env=env,
                cwd=tmp_path,
            )
            assert again.returncode == 2
            assert "no longer pending: it was resolved" in one_line(again)
        finally:
            await handle.terminate()


async def test_effects_lists_each_call_and_show_and_watch_name_a_retry(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client: Client = temporal_env.client
    queue = server_env["KEEL_TASK_QUEUE"]
    session = f"cli-fx-{uuid.uuid4().hex[:8]}"
    config = SessionConfig(model="scripted:x.json")
    env = server_env
    async with stand_in_worker(client, queue):
        handle = await start_stand_in(
            client,
            queue,
            session,
            config,
            [outcome_unknown()],
            effects=records(session),
            events=[retried_event()],
        )
        try:
            as_json = await run("effects", session, "--json", env=env, cwd=tmp_path)
            assert as_json.returncode == 0, as_json.stderr
            listed = json.loads(as_json.stdout)
            assert listed == [r.model_dump(mode="json") for r in records(session).effects]
            assert [(r["tool_use_id"], r["outcome"], r["decided_by"]) for r in listed] == [
                ("t1", "unknown", None),
                ("t2", "retried", "ana"),
            ]

            human = await run("effects", session, env=env, cwd=tmp_path)
            assert human.returncode == 0, human.stderr
            assert human.stdout.splitlines() == [
                f"session {session}: 2 journaled tool call(s), oldest first",
                "refund (toolUseId t1, turn 1): write, unknown (interrupt ou-1)",
                "  attempt 1: started 2026-12-02T10:00:00+00:00 on w1@host, never said how it "
                "ended (its worker stopped, or it still runs): the outcome is unknown",
                "refund (toolUseId t2, turn 1): write, retried by ana (interrupt ou-0)",
                "  attempt 1: started 2026-12-02T10:00:00+00:00 on w1@host, never said how it "
                "ended (its worker stopped, or it still runs): the outcome is unknown",
                "  attempt 2: started 2026-12-02T10:01:00+00:00 on w2@host, ended at "
                "2026-12-02T10:01:02+00:00: returned a result",
            ]

            shown = await run("show", session, env=env, cwd=tmp_path)
            assert shown.returncode == 0, shown.stderr
            retried = "tool refund retried (attempt 2): previous attempt ended without a result"
            assert f"[{retried}]" in shown.stdout.splitlines()
            shown_json = await run("show", session, "--json", env=env, cwd=tmp_path)
            assert shown_json.returncode == 0, shown_json.stderr
            assert json.loads(shown_json.stdout)["tool_retried"] == [{"turn": 1, **RETRIED}]

            watched = await run("watch", session, "--until-idle", env=env, cwd=tmp_path)
            assert watched.returncode == 3, watched.stderr  # its turn waits for a person
            [line] = watched.stdout.splitlines()
            assert line.endswith(
                "tool_retried      refund (t2): retried (attempt 2): previous attempt ended "
                "without a result"
            ), line
        finally:
            await handle.terminate()

    missing = f"nosuch-{uuid.uuid4().hex[:6]}"
    for command in ("effects", "show"):
        done = await run(command, missing, env=env, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert one_line(done) == f"keel: no session {missing!r}"
        assert done.stdout == ""


async def test_a_real_session_offers_resolve_takes_it_and_lists_the_call(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """An AgentSession whose write tool's attempt ended without a result, end to end."""
    from keel import KeelClient, open_store
    from keel.activities.effects_journal import EffectJournal
    from keel.worker.process.assembly import build_worker
    from tests.helpers.scripts import respond, text, tool_use, write_script

    client: Client = temporal_env.client
    queue = server_env["KEEL_TASK_QUEUE"]
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    env = {**server_env, "KEEL_STORE": str(store_dir)}
    session = f"cli-real-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger"
    model = write_script(
        tmp_path / "script.json",
        [
            respond(
                tool_use("r1", "refund", directory=str(ledger), value="refund 7"),
                stop="tool_use",
            ),
            respond(text("done")),
        ],
    )
    EffectJournal(store.backend, f"{session}/r1").start(1, "gone/1")  # as a SIGKILL leaves it
    (tmp_path / "result.txt").write_text("refund 7 went through: ref R-123\n")
    worker = build_worker(client, queue, ["tests.fault_tools"], store=store)
    async with worker:
        keel_client = KeelClient(client, queue, store)
        config = SessionConfig(model=model, tool_modules=["tests.fault_tools"])
        ack = await keel_client.prompt(session, "refund order 7", config=config)
        record = await keel_client.wait_turn(session, ack.turn_id, timeout_s=30)
        [interrupt] = record.interrupts
        assert interrupt.kind == "outcome_unknown"

        pending = await run("pending", session, env=env, cwd=tmp_path)
        assert pending.returncode == 0, pending.stderr
        for command in (
            f"keel approve {session} {interrupt.id}",
            f"keel deny {session} {interrupt.id}",
            f"keel resolve {session} {interrupt.id} --result '...'",
        ):
            assert command in pending.stdout, pending.stdout

        done = await run(
            "resolve", session, interrupt.id, "--result-file", "result.txt", env=env, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        assert (await keel_client.turn(session, ack.turn_id)).status == "completed"

        listed = await run("effects", session, env=env, cwd=tmp_path)
        as_json = await run("effects", session, "--json", env=env, cwd=tmp_path)
        state = await keel_client.state(session)
    assert listed.returncode == 0, listed.stderr
    assert f"refund (toolUseId r1, turn {ack.turn_id}): write, resolved" in listed.stdout
    [call] = json.loads(as_json.stdout)
    assert (call["tool"], call["outcome"], call["effect"]) == ("refund", "resolved", "write")
    assert [a["attempt"] for a in call["attempts"]] == [1]
    result = state.messages[2].content[0].toolResult
    assert result is not None and result.content[0].text == "refund 7 went through: ref R-123\n"
    assert not (ledger / "effects.log").exists()  # nothing ran again
