"""The measured sides of ``tests.benchmarks.actions``: one turn each, waited for by one client.

Keel's turns run on an in-process worker (``build_worker``, the ``tests.sample_tools``
tools) and are waited for by one of the clients users run:

- ``client``: ``KeelClient.run`` (prompt, then ``wait_turn``), in this process;
- ``run``: ``keel run`` (a subprocess), which starts the session and waits;
- ``wait``: ``KeelClient.prompt`` here, then ``keel wait SESSION`` (a subprocess);
- ``watch``: ``KeelClient.prompt``, then ``keel watch SESSION --until-idle`` (a subprocess; a
  person's ``keel watch`` polls the same way, and goes on polling until Ctrl-C);
- ``page``: ``KeelClient.prompt``, then what a browser does with the session page of
  ``keel ui`` (a subprocess): the page (``GET /sessions/ID``), then its live stream
  (``GET /live/sessions/ID``, server-sent events) read until the turn has ended. The end is
  seen from the ``KeelStatus`` search attribute (``DescribeWorkflowExecution``: no Action).

The floor (``tests.benchmarks.floor.FloorLoop``) and the Strands peer
(``tests.benchmarks.peer_strands.StrandsLoop``) are started and waited for on their result
(``GetWorkflowExecutionHistory`` long polls: no Action).

Every model call sleeps ``model_s`` (the scripted model's ``delay_s``) and every tool run
``tool_s`` (``tests.sample_tools.slow``; the floor's and the peer's tools sleep as long).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel import KeelClient, SessionConfig
from keel.workflows.status_attribute import KEEL_STATUS
from tests.helpers.cli import ROOT
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script

CLIENTS = ("client", "run", "wait", "watch", "page")
TURN_LIMIT_S = 600.0
WATCH_EVERY_S = 0.2
RESULT_SIZE = 10


@dataclass(frozen=True)
class Delays:
    """How long each model call and each tool run takes."""

    model_s: float
    tool_s: float

    @property
    def label(self) -> str:
        """``model_s=2,tool_s=0.1``."""
        return f"model_s={self.model_s:g},tool_s={self.tool_s:g}"


def keel_script(
    workdir: Path,
    cycles: int,
    delays: Delays,
    *,
    approval: bool = False,
    heartbeat_timeout_s: float | None = None,
) -> SessionConfig:
    """A session whose turn runs ``cycles`` tool cycles (``slow``), then answers.

    With ``approval``, the one tool (``echo``) needs approval: the turn parks on it.
    """
    responses: list[dict[str, Any]] = []
    for i in range(cycles):
        use = (
            tool_use(f"e{i}", "echo", text="x")
            if approval
            else tool_use(f"s{i}", "slow", seconds=delays.tool_s, label=str(i))
        )
        responses.append(respond(use, stop="tool_use", delay_s=delays.model_s))
    responses.append(respond(text("done"), delay_s=delays.model_s))
    name = f"script-{uuid.uuid4().hex[:10]}.json"
    return SessionConfig(
        model=write_script(workdir / name, responses),
        tool_modules=[SAMPLE_TOOLS],
        approval_tools=["echo"] if approval else [],
        heartbeat_timeout_s=heartbeat_timeout_s,
    )


async def until_settled(client: Client, session: str, states: tuple[str, ...]) -> str:
    """Wait until the session's ``KeelStatus`` is one of ``states`` (describe: no Action)."""
    handle = client.get_workflow_handle(session)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TURN_LIMIT_S
    while True:
        status = (await handle.describe()).typed_search_attributes.get(KEEL_STATUS)
        if status in states:
            return status
        if loop.time() > deadline:
            raise TimeoutError(f"{session} is still {status}")
        await asyncio.sleep(WATCH_EVERY_S)


async def command(env: dict[str, str], *args: str) -> str:
    """``keel ARGS`` in a subprocess, to its end; its stdout. Raises on a failed exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "keel.worker.cli",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TURN_LIMIT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"keel {args[0]} exited {proc.returncode}: {err.decode()[-2000:]}")
    return out.decode()


class KeelSide:
    """Turns of Keel sessions, each waited for by one client."""

    def __init__(
        self, keel: KeelClient, env: dict[str, str], ui_url: str | None, workdir: Path
    ) -> None:
        """The client, the CLI's environment, the ``keel ui`` page (for ``page``)."""
        self.keel = keel
        self.env = env
        self.ui_url = ui_url
        self.workdir = workdir
        self.sessions: list[str] = []

    async def turn(self, waiter: str, config: SessionConfig) -> None:
        """Start a session with one turn under ``config``; ``waiter`` waits for its end."""
        session = f"act-{waiter}-{uuid.uuid4().hex[:10]}"
        self.sessions.append(session)
        if waiter == "client":
            record = await self.keel.run(session, "go", config=config, timeout_s=TURN_LIMIT_S)
            if record.status != "completed":
                raise RuntimeError(f"{session}: {record.status}")
            return
        if waiter == "run":
            model, tools = config.model, ",".join(config.tool_modules)
            await command(
                self.env, "run", "--session", session, "--model", model, "--tools", tools,
                "--no-input", "--json", "go",
            )  # fmt: skip
            return
        await self.keel.prompt(session, "go", config=config)
        if waiter == "wait":
            await command(self.env, "wait", "--no-input", "--json", session)
        elif waiter == "watch":
            await command(self.env, "watch", "--until-idle", session)
        elif waiter == "page":
            await self._page(session)
        else:
            raise ValueError(f"unknown client {waiter!r}")

    async def _page(self, session: str) -> None:
        """The session page, then its live stream until the turn has ended."""
        assert self.ui_url is not None, "the page needs keel ui"
        host, port = self.ui_url.removeprefix("http://").split("/")[0].split(":")
        await _get(host, int(port), f"/sessions/{session}")
        stream = asyncio.create_task(_read_stream(host, int(port), f"/live/sessions/{session}"))
        try:
            await until_settled(self.keel.client, session, ("idle", "waiting"))
        finally:
            stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stream
        if stream.done() and not stream.cancelled() and stream.exception() is not None:
            raise RuntimeError(f"the live stream failed: {stream.exception()!r}")

    async def forget(self) -> None:
        """Terminate the sessions started so far (no Action), so none runs on."""
        for session in self.sessions:
            with contextlib.suppress(Exception):
                await self.keel.client.get_workflow_handle(session).terminate("measured")
        self.sessions.clear()


async def _get(host: str, port: int, path: str) -> bytes:
    """One HTTP GET, read to its end (as the browser loads the page)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status = answer.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(f"GET {path}: {status.decode()}")
    return answer


async def _read_stream(host: str, port: int, path: str) -> None:
    """Read a server-sent-event stream until cancelled (as the browser's EventSource)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        while await reader.read(65536):
            pass
    finally:
        writer.close()


class LoopSide:
    """Turns of a plain Temporal loop (the floor, the peer), waited for on their result."""

    def __init__(self, client: Client, workflow: str, task_queue: str) -> None:
        """A client with the default converter, the loop's workflow type and queue."""
        self.client = client
        self.workflow = workflow
        self.task_queue = task_queue

    async def turn(self, cycles: int, delays: Delays) -> None:
        """One run of ``cycles`` tool cycles, waited for on its result."""
        loop_input: dict[str, Any] = {"cycles": cycles, "result_size": RESULT_SIZE}
        if delays.model_s:
            loop_input["model_delay_s"] = delays.model_s
        if delays.tool_s:
            loop_input["tool_delay_s"] = delays.tool_s
        await self.client.execute_workflow(
            self.workflow,
            loop_input,
            id=f"act-{self.workflow}-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
        )
