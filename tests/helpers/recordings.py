"""Recorded sessions for ``keel replay``, ``fork``, ``export`` and ``eval``, run as a user does.

A recording has two turns: a write (``record``: a line in a ledger file, so a replay that
ran it would show) and a read, then an addition and an answer. ``replaying`` runs a worker
in the test's event loop on the CLI's task queue and store, so the ``keel`` processes the
test starts (in threads, ``run``) reach it.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel import KeelClient, SessionConfig, open_store
from keel.activities.store import Keyring
from keel.worker.process.assembly import build_worker
from tests.helpers.cli import keel
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script


def lines(path: Path) -> list[str]:
    """The lines of a ledger file; none when it was never written."""
    return path.read_text().splitlines() if path.exists() else []


def recorded_responses(ledger: Path, value: str = "refund 7") -> list[dict[str, Any]]:
    """What a model says in a recording (or a replay making the same calls, ids aside)."""
    return [
        respond(tool_use("a1", "record", path=str(ledger), value=value), stop="tool_use"),
        respond(tool_use("a2", "echo", text="ok?"), stop="tool_use"),
        respond(text(f"refunded {value.split()[-1]}")),
        respond(tool_use("b1", "add", a=2, b=3), stop="tool_use"),
        respond(text("2 + 3 = 5")),
    ]


@dataclass
class Replaying:
    """A test's Temporal, worker and client, and the environment of its ``keel`` processes."""

    env: dict[str, str]
    keel: KeelClient
    tmp: Path

    async def record(self, ledger: Path, value: str = "refund 7", session: str = "") -> str:
        """Record a two-turn session whose first turn writes ``value`` to ``ledger``."""
        session = session or f"rec-{uuid.uuid4().hex[:8]}"
        model = self.script(recorded_responses(ledger, value))
        config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
        first = await self.keel.run(session, "refund order 7", config=config, timeout_s=30)
        assert first.status == "completed", first.error
        second = await self.keel.run(session, "what is 2 + 3?", timeout_s=30)
        assert second.status == "completed", second.error
        return session

    def script(self, responses: list[dict[str, Any]]) -> str:
        """A scripted model file with these responses; its model spec."""
        return write_script(self.tmp / f"script-{uuid.uuid4().hex[:8]}.json", responses)

    async def run(self, *args: str, env: dict[str, str] | None = None) -> Done:
        """``keel ARGS`` in a thread, so the worker in this loop keeps answering."""
        return await asyncio.to_thread(keel, *args, env=env or self.env, cwd=self.tmp)


Done = subprocess.CompletedProcess[str]


@asynccontextmanager
async def replaying(
    client: Client, server_env: dict[str, str], tmp: Path, keyring: Keyring | None = None
) -> AsyncIterator[Replaying]:
    """A worker with the sample tools on the CLI's task queue and store, for the block."""
    queue = server_env["KEEL_TASK_QUEUE"]
    store = open_store(str(tmp / "store"), keyring)
    env = {**server_env, "KEEL_STORE": str(tmp / "store")}
    async with build_worker(client, queue, [SAMPLE_TOOLS], store=store):
        yield Replaying(env=env, keel=KeelClient(client, queue, store), tmp=tmp)


def one_line(done: Done) -> str:
    """The one line a refused ``keel`` command says on stderr (never a traceback)."""
    assert "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.strip().splitlines() if line]
    assert len(said) == 1, done.stderr
    return said[0]
