"""``keel replay``, ``keel fork`` and ``keel export``, run as a user runs them.

A recorded session's first turn writes a line to a ledger file (a ``write`` tool): a replay
that ran it would show there. The worker runs in the test's event loop; each ``keel`` is its
own process, in a thread.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from keel.worker.payloads import data_converter
from tests.helpers.cli import keel, keel_env
from tests.helpers.encryption import keyring_of, new_key
from tests.helpers.recordings import lines, one_line, recorded_responses, replaying
from tests.helpers.scripts import respond, text, tool_use, write_script


def replay_id(stdout: str) -> str:
    match = re.search(r" in session (\S+) \(", stdout)
    assert match, stdout
    return match.group(1)


async def test_replay_same_calls_another_call_and_live_read(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with replaying(temporal_env.client, server_env, tmp_path) as world:
        session = await world.record(ledger)
        assert lines(ledger) == ["refund 7"]

        # the same calls (other ids, other words): exit 0, nothing ran
        same = world.script(recorded_responses(ledger))
        done = await world.run("replay", session, "--model", same)
        assert done.returncode == 0, done.stderr
        out = done.stdout.splitlines()
        assert out[2:8] == [
            "turn 1: refund order 7",
            f'  recorded calls:  record {{"path": "{ledger}", "value": "refund 7"}}, echo '
            '{"text": "ok?"}',
            f'  replayed calls:  record {{"path": "{ledger}", "value": "refund 7"}}, echo '
            '{"text": "ok?"}',
            "  recorded answer: refunded 7",
            "  replayed answer: refunded 7",
            "",
        ], done.stdout
        assert "no divergence: 2 turn(s) replayed" in done.stdout
        assert lines(ledger) == ["refund 7"], "a replay ran the write tool"
        state = await world.keel.state(replay_id(done.stdout))
        events = [e.type for e in state.events]
        assert "tool_started" not in events and events.count("replay_answered") == 3

        # another call: exit 1, the divergence named, in words and in JSON
        other = world.script(
            [
                respond(
                    tool_use("n1", "record", path=str(ledger), value="refund 700"), stop="tool_use"
                ),
                respond(text("refunded 700")),
            ]
        )
        said = await world.run("replay", session, "--model", other)
        assert said.returncode == 1, said.stderr
        assert (
            f'DIVERGED at turn 1, call 1: the new model called record {{"path": "{ledger}", '
            f'"value": "refund 700"}}; the recording\'s next call was record {{"path": '
            f'"{ledger}", "value": "refund 7"}}'
        ) in said.stdout, said.stdout
        as_json = await world.run("replay", session, "--model", other, "--json")
        assert as_json.returncode == 1, as_json.stderr
        report = json.loads(as_json.stdout)
        assert report["session"] == session and report["diverged"] is True
        assert report["divergence"] == {
            "turn": 1,
            "index": 0,
            "recorded": {"name": "record", "input": {"path": str(ledger), "value": "refund 7"}},
            "replayed": {"name": "record", "input": {"path": str(ledger), "value": "refund 700"}},
        }
        assert report["answers"][0]["recorded"] == "refunded 7"
        assert set(report["usage"]) == {"recorded", "replayed"}
        assert report["turns"] == 1

        # --live-read: an unmatched read runs; an unmatched write still never does
        reading = world.script(
            [
                respond(tool_use("n1", "echo", text="live!"), stop="tool_use"),
                respond(
                    tool_use("n2", "record", path=str(ledger), value="refund 8"), stop="tool_use"
                ),
                respond(text("never")),
            ]
        )
        live = await world.run("replay", session, "--model", reading, "--live-read", "--json")
        assert live.returncode == 1, live.stderr
        report = json.loads(live.stdout)
        assert report["divergence"]["replayed"]["name"] == "record"
        assert report["divergence"]["index"] == 1
        assert report["calls"][0]["replayed"][0] == {"name": "echo", "input": {"text": "live!"}}
        assert lines(ledger) == ["refund 7"], "a replay ran the write tool"
        replayed = await world.keel.state(report["replay_session"])
        assert replayed.replay is not None and replayed.replay.live == ["n1"]

        # bad input: exit 2, one line, nothing started
        missing = await world.run("replay", "nosuch-session", "--model", same)
        assert missing.returncode == 2 and one_line(missing) == "keel: no session 'nosuch-session'"
        for flags, words in (
            (["--model", "nope:x"], "--model: "),
            ([], "give the model to replay with: --model SPEC"),
            (["--agent", "missing.toml"], "--agent missing.toml: "),
            (["--model", same, "--turn-timeout", "0"], "--turn-timeout must be more than 0"),
        ):
            bad = await world.run("replay", session, *flags)
            assert bad.returncode == 2, (flags, bad.stderr)
            assert one_line(bad).startswith(f"keel: {words}"), (flags, bad.stderr)
        assert len((await world.keel.state(session)).turns) == 2


async def test_fork_at_a_prefix_goes_on_and_a_dangling_fork_is_refused(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with replaying(temporal_env.client, server_env, tmp_path) as world:
        session = await world.record(ledger)
        original = await world.keel.state(session)
        assert len(original.messages) == 10

        done = await world.run("fork", session, "--at", "6", "--session", f"{session}-f")
        assert done.returncode == 0, done.stderr
        fork = f"{session}-f"
        assert done.stdout.splitlines() == [
            f"session {fork}: the first 6 message(s) of {session}; nothing ran, and {session} "
            "is unchanged",
            f"go on with: keel run --session {fork} 'your prompt'",
        ]
        forked = await world.keel.state(fork)
        assert [m.model_dump() for m in forked.messages] == [
            m.model_dump() for m in original.messages[:6]
        ]
        assert forked.turns == [] and forked.config.model == original.config.model
        assert lines(ledger) == ["refund 7"]

        # keel run goes on from there (the script's 4th and 5th answers)
        went_on = await world.run("run", "--session", fork, "what is 2 + 3?")
        assert went_on.returncode == 0, went_on.stderr
        assert "2 + 3 = 5" in went_on.stdout

        # another model and system prompt, as JSON
        other = world.script([respond(text("hi"))])
        as_json = await world.run(
            "fork", session, "--at", "3", "--model", other, "--system", "be brief", "--json"
        )
        assert as_json.returncode == 0, as_json.stderr
        said = json.loads(as_json.stdout)
        assert said["session"] == session and said["at"] == 3
        assert said["changed"] == ["model", "system"]
        assert said["command"] == f"keel run --session {said['fork']} 'your prompt'"
        changed = (await world.keel.state(said["fork"])).config
        assert (changed.model, changed.system) == (other, "be brief")

        # a fork that leaves a toolUse without its result, or out of range: exit 2
        dangling = await world.run("fork", session, "--at", "4")
        assert dangling.returncode == 2
        assert "--at 4 would end on message 4 (an assistant message)" in one_line(dangling)
        assert "(echo)" in dangling.stderr
        far = await world.run("fork", session, "--at", "11")
        assert far.returncode == 2 and "out of range" in one_line(far)
        taken = await world.run("fork", session, "--at", "6", "--session", fork)
        assert taken.returncode == 2 and f"session {fork!r} exists already" in one_line(taken)
        after = await world.keel.state(session)
        assert [m.model_dump() for m in after.messages] == [
            m.model_dump() for m in original.messages
        ]


async def test_export_writes_a_case_and_never_over_a_file(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with replaying(temporal_env.client, server_env, tmp_path) as world:
        session = await world.record(ledger)
        printed = await world.run("export", session)
        assert printed.returncode == 0, printed.stderr
        case = json.loads(printed.stdout)
        assert (case["keel_case"], case["name"], case["session"]) == (1, session, session)
        assert [t["prompt"] for t in case["turns"]] == [
            [{"text": "refund order 7"}],
            [{"text": "what is 2 + 3?"}],
        ]
        assert [c["name"] for c in case["turns"][0]["calls"]] == ["record", "echo"]
        assert case["turns"][0]["calls"][0]["result"]["content"] == [{"text": "recorded refund 7"}]
        assert case["turns"][1]["answer"] == "2 + 3 = 5"
        assert case["expect"] == {
            "answer_contains": [],
            "answer_matches": [],
            "tools_called": [],
            "output_schema": None,
        }
        assert case["settings"]["tool_modules"] == ["tests.sample_tools"]

        written = await world.run("export", session, "--out", "case.json", "--name", "refund")
        assert written.returncode == 0, written.stderr
        assert json.loads((tmp_path / "case.json").read_text())["name"] == "refund"
        assert "fill its expect block, then: keel eval case.json --model SPEC" in written.stderr
        again = await world.run("export", session, "--out", "case.json")
        assert again.returncode == 2
        assert one_line(again).endswith("case.json exists; not overwritten (remove it first)")
        assert json.loads((tmp_path / "case.json").read_text())["name"] == "refund"
        missing = await world.run("export", "nosuch-session")
        assert missing.returncode == 2 and one_line(missing) == "keel: no session 'nosuch-session'"


async def test_an_encrypted_session_is_exported_with_the_key_and_refused_without(
    temporal_env: WorkflowEnvironment, server_env: dict[str, str], tmp_path: Path
) -> None:
    from temporalio.client import Client

    key = new_key()
    keyring = keyring_of(key)
    base = temporal_env.client
    client = Client(
        base.service_client, namespace=base.namespace, data_converter=data_converter(keyring)
    )
    ledger = tmp_path / "ledger.txt"
    async with replaying(client, server_env, tmp_path, keyring) as world:
        session = await world.record(ledger, value="refund CANARY-5e1")
        with_key = world.env | {"KEEL_ENCRYPTION_KEY": key}
        done = await world.run("export", session, "--out", "secret.json", env=with_key)
        assert done.returncode == 0, done.stderr
        assert "CANARY-5e1" in (tmp_path / "secret.json").read_text()
        assert f"session {session} is encrypted; the case holds it decrypted" in done.stderr

        for command in (["export", session, "--out", "blind.json"], ["fork", session, "--at", "2"]):
            blind = await world.run(*command)
            assert blind.returncode == 2, blind.stderr
            said = one_line(blind)
            assert said.startswith(f"keel: session {session!r} is encrypted (key "), said
            assert "set KEEL_ENCRYPTION_KEY" in said and "CANARY" not in blind.stdout + said
        assert not (tmp_path / "blind.json").exists()
        wrong = await world.run(
            "export", session, env=world.env | {"KEEL_ENCRYPTION_KEY": new_key()}
        )
        assert wrong.returncode == 2, wrong.stderr
        assert "is encrypted with a key this process does not have" in one_line(wrong)

        # the replay of an encrypted session runs with the key
        same = world.script(recorded_responses(ledger, "refund CANARY-5e1"))
        replayed = await world.run("replay", session, "--model", same, "--json", env=with_key)
        assert replayed.returncode == 0, replayed.stderr
        assert json.loads(replayed.stdout)["diverged"] is False
    assert lines(ledger) == ["refund CANARY-5e1"]


def test_replay_and_eval_on_the_embedded_server(tmp_path: Path) -> None:
    """No Temporal known: keel run embeds one; keel replay and eval run workers with the tools."""
    ledger = tmp_path / "ledger.txt"
    env = keel_env(KEEL_HOME=str(tmp_path / "home"))
    model = write_script(tmp_path / "rec.json", recorded_responses(ledger)[:3])
    run = keel(
        "run", "--session", "emb-1", "--model", model, "--tools", "tests.sample_tools",
        "refund order 7", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    same = write_script(tmp_path / "same.json", recorded_responses(ledger)[:3])
    done = keel("replay", "emb-1", "--model", same, "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["diverged"] is False and report["answers"][0]["replayed"] == "refunded 7"

    # a case file evaluated where no Temporal and no database are: as in a fresh CI checkout
    exported = keel("export", "emb-1", "--out", "case.json", env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    fresh = keel_env(KEEL_HOME=str(tmp_path / "ci"))
    evaluated = keel("eval", "case.json", "--model", same, env=fresh, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "1 passed, 0 failed" in evaluated.stdout
    assert "keeping the replay sessions in" in evaluated.stderr
    assert lines(ledger) == ["refund 7"]
