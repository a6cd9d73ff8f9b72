"""Encryption at rest (KEEL_ENCRYPTION_KEY): key rotation mid-session, and the wrong key.

The canary test through the CLI is in ``tests/worker/cli/test_cli_encryption.py``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, open_store
from keel.activities.store import EncryptionKeyError, Keyring, StoreEncryptionError
from keel.worker.encryption import KEY_ID
from keel.worker.payloads import data_converter
from keel.worker.process.assembly import build_worker
from tests.helpers.encryption import history_payload_data, keyring_of, new_key, store_bytes
from tests.helpers.fixture_types import Script
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use
from tests.helpers.temporal import temporal_cli


def sid() -> str:
    return f"e-{uuid.uuid4().hex[:10]}"


def client_with(env: WorkflowEnvironment, keyring: Keyring | None) -> Client:
    base = env.client
    return Client(
        base.service_client, namespace=base.namespace, data_converter=data_converter(keyring)
    )


def key_ids_in_history(history: WorkflowHistory) -> set[str]:
    """The key ids named by the history's encrypted payloads."""
    found = re.findall(rf'"{KEY_ID}": "([^"]+)"', history.to_json())
    return {base64.b64decode(v).decode() for v in found}


async def test_keys_rotate_mid_session(
    temporal_env: WorkflowEnvironment, task_queue: str, script: Script, tmp_path: Path
) -> None:
    old, new = new_key(), new_key()
    first, rotated = keyring_of(old), keyring_of(new, old)
    root = tmp_path / "store"
    config = script(
        [
            respond(tool_use("t1", "add", a=2, b=3), stop="tool_use"),
            respond(text("five")),
            respond(tool_use("t2", "add", a=1, b=1), stop="tool_use"),
            respond(text("two")),
        ]
    )
    session = sid()
    for keys, prompt, answer in ((first, "2 + 3?", "five"), (rotated, "1 + 1?", "two")):
        client = client_with(temporal_env, keys)
        store = open_store(str(root), keys)
        keel = KeelClient(client, task_queue, store)
        worker = build_worker(
            client, task_queue, [SAMPLE_TOOLS], store=store, max_cached_workflows=0
        )
        async with worker:
            done = await keel.run(
                session, prompt, config=config if keys is first else None, timeout_s=30
            )
            assert done.status == "completed", done
            assert done.message is not None and done.message.content[0].text == answer
            state = await keel.state(session)
            if keys is rotated:
                # without the old key, what it encrypted does not read: the error names it
                blind = KeelClient(client, task_queue, open_store(str(root), keyring_of(new)))
                with pytest.raises(StoreEncryptionError, match=f"key {first.key_ids[0]}"):
                    await blind.state(session)
    # the whole conversation reads with the new key plus the old one
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"] * 2
    history = await temporal_env.client.get_workflow_handle(session).fetch_history()
    ids = key_ids_in_history(history)
    assert ids == set(first.key_ids) | set(keyring_of(new).key_ids)
    assert b"five" not in store_bytes(root)
    assert b"2 + 3?" not in history_payload_data(history)


async def test_a_worker_with_the_wrong_key_fails_clearly_and_wedges_nothing(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    script: Script,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    right, wrong = keyring_of(new_key()), keyring_of(new_key())
    root = tmp_path / "store"
    config = script([respond(text("hello"))])
    client = client_with(temporal_env, right)
    keel = KeelClient(client, task_queue, open_store(str(root), right))
    session = sid()
    caplog.set_level(logging.WARNING)
    bad_client = client_with(temporal_env, wrong)
    bad = build_worker(
        bad_client,
        task_queue,
        [SAMPLE_TOOLS],
        store=open_store(str(root), wrong),
        max_cached_workflows=0,
    )
    sending = asyncio.ensure_future(keel.run(session, "hi", config=config, timeout_s=60))
    async with bad:
        await asyncio.sleep(3)
        assert not sending.done()
    messages = "\n".join(r.getMessage() + str(r.exc_info and r.exc_info[1]) for r in caplog.records)
    assert f"encrypted with key {right.key_ids[0]}" in messages
    # a worker with the right key picks the session up: nothing was lost
    good = build_worker(
        client,
        task_queue,
        [SAMPLE_TOOLS],
        store=open_store(str(root), right),
        max_cached_workflows=0,
    )
    async with good:
        done = await asyncio.wait_for(sending, 60)
    assert done.status == "completed"


async def test_a_client_without_the_key_is_told_which_key(
    temporal_env: WorkflowEnvironment, task_queue: str, script: Script, tmp_path: Path
) -> None:
    right = keyring_of(new_key())
    root = tmp_path / "store"
    client = client_with(temporal_env, right)
    store = open_store(str(root), right)
    keel = KeelClient(client, task_queue, store)
    session = sid()
    async with build_worker(client, task_queue, [SAMPLE_TOOLS], store=store):
        done = await keel.run(session, "hi", config=script([respond(text("yo"))]), timeout_s=30)
        assert done.status == "completed"
        for keys in (None, keyring_of(new_key())):
            blind = KeelClient(
                client_with(temporal_env, keys), task_queue, open_store(str(root), keys)
            )
            with pytest.raises(EncryptionKeyError, match=f"key {right.key_ids[0]}|different keys"):
                await blind.state(session)
    with pytest.raises(StoreEncryptionError, match=f"key {right.key_ids[0]}"):
        open_store(str(root)).backend.get(
            next(p for p in root.rglob("*") if p.is_file()).relative_to(root).parts[0]
            + "/"
            + next(p for p in root.rglob("*") if p.is_file()).name
        )


async def test_payloads_no_key_opens_never_wedge_a_session(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    script: Script,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Signals, updates and queries that claim to be encrypted, without the key (issue 29).

    Sent with the raw ``temporal`` CLI: random bytes under the session's own key id (which
    any payload's metadata shows), under a made-up key id, and a ciphertext shorter than a
    nonce. Each signal is dropped, each update and query refused, and the session completes.
    """
    caplog.set_level(logging.WARNING, logger="keel.encryption")
    right = keyring_of(new_key())
    kid = right.key_ids[0]
    root = tmp_path / "store"
    client = client_with(temporal_env, right)
    keel = KeelClient(client, task_queue, open_store(str(root), right))
    target = tmp_path / "out.txt"
    config = script(
        [
            respond(tool_use("g1", "guarded_record", path=str(target), value="v"), stop="tool_use"),
            respond(text("done")),
        ]
    )
    session = sid()
    worker = build_worker(
        client, task_queue, [SAMPLE_TOOLS], store=open_store(str(root), right),
        max_cached_workflows=0,
    )  # fmt: skip
    async with worker:
        first = await keel.run(session, "go", config=config, timeout_s=30)
        [interrupt] = first.interrupts
        garbage = [
            (kid, base64.b64encode(os.urandom(64)).decode()),
            (kid, base64.b64encode(b"short").decode()),
            ("deadbeef", base64.b64encode(os.urandom(64)).decode()),
        ]
        for key_id, data in garbage:
            meta = ["--input-meta", "encoding=binary/encrypted",
                    "--input-meta", f"encryption-key-id={key_id}", "--input-base64"]  # fmt: skip
            for name in ("decide", "respond", "close"):
                sent = await temporal_cli(
                    temporal_env, "workflow", "signal", "-w", session, "--name", name,
                    "--input", data, *meta,
                )  # fmt: skip
                assert sent.returncode == 0, sent.stderr
            updated = await temporal_cli(
                temporal_env, "workflow", "update", "execute", "-w", session, "--name", "decide",
                "--input", data, *meta,
            )  # fmt: skip
            # the refusal is itself encrypted (failures are, in an encrypted session): its type
            assert updated.returncode != 0, updated.stdout
            assert "EncryptionKeyError" in updated.stderr, updated.stderr
            queried = await temporal_cli(
                temporal_env, "workflow", "query", "-w", session, "--name", "state",
                "--input", data, *meta,
            )  # fmt: skip
            assert queried.returncode != 0 and "decrypt" not in queried.stdout, queried.stdout
            logged = " ".join(r.getMessage() for r in caplog.records)
            assert f"key {key_id}" in logged  # the worker's log names the key id
        # the session still answers and works
        assert (await keel.pending(session)).interrupts[0].id == interrupt.id
        await keel.decide(session, interrupt.id, "approve")
        done = await keel.wait_turn(session, first.turn_id, timeout_s=30)
        state = await keel.state(session)
    assert done.status == "completed", done
    assert target.read_text().splitlines() == ["v"]
    assert state.status == "idle"  # the forged "close" signals were dropped
