"""What a fleet pays Temporal: billable Actions per agent cycle, per parked hour, per heartbeat.

Temporal Cloud bills by Actions (a workflow start, an activity start, each recorded heartbeat,
each query, a signal, an update, a search-attribute upsert, a timer...). The dev server
counts them in its ``action`` metric by ``action_type`` (``--metrics-port``; see
``tests.benchmarks.action_meter``). One fresh in-memory dev server serves the whole run; the
sides run one after another, each between two settled readings of the metric with nothing
else running (an idle window checks that nothing counts when nothing runs).

Figures (``figure[labels] value unit``):

- ``actions_per_cycle[system,client,model_s,tool_s]``: (Actions of a turn of ``--cycles`` C
  tool cycles - Actions of a turn of none, same client, same delays) / C, in total and by
  ``type``: one model call and one tool run, with what the waiting client paid meanwhile.
  ``actions_per_turn`` gives both turns whole. Systems: ``keel`` with each waiting client
  (``tests.benchmarks.action_sides``), the ``floor`` (``FloorLoop``, waited for on its result)
  and the ``strands`` peer (when its venv is there, see ``--strands``);
  ``per_cycle_over_floor``: Keel's or the peer's per cycle - the floor's (goal: <= +1).
- ``parked_actions_per_hour``: a Keel session parked on an approval, no client waiting,
  measured over ``--parked-s`` and scaled to an hour (and a day).
- ``heartbeats_per_call`` / ``call_actions`` / ``recovery_s`` / ``turn_done_after_kill_s``
  for each ``--heartbeat-timeouts`` (``SessionConfig.heartbeat_timeout_s``): a model call of
  ``--call-s`` on a ``keel worker`` process, then the same call with the worker killed
  ``--kill-at`` s into it (``tests.benchmarks.action_recovery``).

Usage::

    python3 -m tests.benchmarks.actions [--quick] [--markdown FILE] [--cycles 2]
        [--model-delays 0.1,2,10] [--tool-delays 0.1,5] [--clients client,run,wait,watch,page]
        [--systems keel,floor,strands] [--parked-s 30] [--heartbeat-timeouts 2,5,10,30]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from keel import KeelClient, connect, open_store
from keel.worker.process.assembly import build_worker
from tests.benchmarks.action_meter import ActionMeter, Actions, ActionServer
from tests.benchmarks.action_recovery import tradeoff
from tests.benchmarks.action_report import Cycles, Report, lines, markdown
from tests.benchmarks.action_sides import (
    CLIENTS,
    Delays,
    KeelSide,
    LoopSide,
    keel_script,
    until_settled,
)
from tests.benchmarks.floor import WORKFLOW as FLOOR_WORKFLOW
from tests.benchmarks.floor import FloorLoop, floor_model, floor_tool
from tests.benchmarks.peer import STRANDS, default_venv, ensure_venv, venv_python
from tests.benchmarks.server import describe
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS
from tests.helpers.temporal import free_port

SYSTEMS = ("keel", "floor", "strands")


async def measure(
    meter: ActionMeter, side: Callable[[], Awaitable[None]], before: Actions | None = None
) -> tuple[Actions, Actions]:
    """The Actions counted while ``side`` ran, and the settled reading after it.

    Args:
        meter: the server's meter.
        side: what to measure.
        before: a settled reading with nothing run since (the one after the side before);
            None: read now.
    """
    if before is None:
        before = await meter.settled()
    await side()
    after = await meter.settled()
    return after.minus(before), after


async def window(meter: ActionMeter, seconds: float) -> tuple[Actions, float]:
    """The Actions counted over ``seconds`` of nothing done here, and the window's length."""
    loop = asyncio.get_running_loop()
    before = await meter.settled()
    started = loop.time()
    await asyncio.sleep(seconds)
    after = await meter.settled()
    return after.minus(before), loop.time() - started


class Bench:
    """One run: the server, its meter, the options."""

    def __init__(self, server: ActionServer, args: argparse.Namespace, workdir: Path) -> None:
        """Keep what every side needs."""
        self.server = server
        self.meter = server.meter()
        self.args = args
        self.workdir = workdir
        self.report = Report()
        self.delays = [Delays(m, t) for m in args.model_delays for t in args.tool_delays]

    def keel_env(self, queue: str, store: Path) -> dict[str, str]:
        """The CLI's environment: this server, the queue, the store."""
        return keel_env(
            TEMPORAL_ADDRESS=self.server.address, KEEL_TASK_QUEUE=queue, KEEL_STORE=str(store)
        )

    async def keel(self) -> None:
        """Keel's sides, the idle window and the parked session, on an in-process worker."""
        client = await connect(self.server.address, "default")
        store_dir = self.workdir / "store"
        store = open_store(str(store_dir))
        queue = f"act-keel-{uuid.uuid4().hex[:6]}"
        keel = KeelClient(client, queue, store)
        env = self.keel_env(queue, store_dir)
        async with build_worker(client, queue, [SAMPLE_TOOLS], store=store):
            ui, url = await self._ui(env) if "page" in self.args.clients else (None, None)
            try:
                side = KeelSide(keel, env, url, self.workdir)
                if self.args.idle_s > 0:
                    self.report.idle = await window(self.meter, self.args.idle_s)
                for delays in self.delays:
                    for waiter in self.args.clients:
                        row = await self._cycles(
                            "keel",
                            waiter,
                            delays,
                            lambda c, d=delays, w=waiter: side.turn(
                                w, keel_script(self.workdir, c, d)
                            ),
                        )
                        await side.forget()
                        self._say(row)
                if self.args.parked_s > 0:
                    parked = keel_script(self.workdir, 1, Delays(0.1, 0.1), approval=True)
                    await side.keel.prompt("act-parked", "go", config=parked)
                    await until_settled(client, "act-parked", ("waiting",))
                    self.report.parked = await window(self.meter, self.args.parked_s)
                    side.sessions.append("act-parked")
                    await side.forget()
            finally:
                if ui is not None:
                    ui.terminate()
                    await ui.wait()

    async def _ui(self, env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
        """``keel ui`` on a free port (loopback, no token); the process and its address."""
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "keel.worker.cli", "ui", "--port", str(free_port())),
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line.startswith("Keel UI at "):
            proc.terminate()
            raise RuntimeError(f"keel ui did not start: {line!r}")
        return proc, line.split()[3].split("/?")[0].rstrip("/")

    async def _cycles(
        self,
        system: str,
        client: str,
        delays: Delays,
        turn: Callable[[int], Awaitable[None]],
    ) -> Cycles:
        cycles = self.args.cycles
        with_cycles, after = await measure(self.meter, lambda: turn(cycles))
        without, _ = await measure(self.meter, lambda: turn(0), after)
        row = Cycles(system, client, delays, cycles, with_cycles, without)
        self.report.cycles.append(row)
        return row

    def _say(self, row: Cycles) -> None:
        """Print a side's figure as it comes (a long run shows progress)."""
        if self.args.progress:
            print(f"# {row.labels}: {row.per_cycle().total:.1f} actions per cycle", flush=True)

    async def floor(self) -> None:
        """The floor's sides, on an in-process worker with the default converter."""
        client = await Client.connect(self.server.address, namespace="default")
        queue = f"act-floor-{uuid.uuid4().hex[:6]}"
        side = LoopSide(client, FLOOR_WORKFLOW, queue)
        worker = Worker(
            client, task_queue=queue, workflows=[FloorLoop], activities=[floor_model, floor_tool]
        )
        async with worker:
            for delays in self.delays:
                row = await self._cycles(
                    "floor", "result", delays, lambda c, d=delays: side.turn(c, d)
                )
                self._say(row)

    async def strands(self) -> None:
        """The Strands peer's sides, its worker in its venv (see ``--strands``)."""
        venv = default_venv(STRANDS)
        if self.args.strands == "make":
            python, made = ensure_venv(STRANDS, venv, importlib.metadata.version("temporalio"))
            self.report.header.append(made)
        elif venv_python(venv).exists():
            python = venv_python(venv)
        else:
            self.report.skipped.append(
                f"strands: no venv at {venv} (--strands make installs it with pip, ~30 s)"
            )
            return
        queue = f"act-strands-{uuid.uuid4().hex[:6]}"
        proc = await asyncio.create_subprocess_exec(
            *STRANDS.entry(python),
            *("--address", self.server.address, "--task-queue", queue),
            cwd=ROOT,
            env=keel_env(),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise RuntimeError(f"the strands worker did not start: {line!r}")
            client = await Client.connect(self.server.address, namespace="default")
            side = LoopSide(client, STRANDS.workflow, queue)
            for delays in self.delays:
                row = await self._cycles(
                    "strands", "result", delays, lambda c, d=delays: side.turn(c, d)
                )
                self._say(row)
        finally:
            proc.terminate()
            await proc.wait()

    async def heartbeats(self) -> None:
        """The heartbeat trade-off, on ``keel worker`` processes of a queue of its own."""
        client = await connect(self.server.address, "default")
        store_dir = self.workdir / "store-hb"
        queue = f"act-hb-{uuid.uuid4().hex[:6]}"
        keel = KeelClient(client, queue, open_store(str(store_dir)))
        env = self.keel_env(queue, store_dir)
        self.report.call_s = self.args.call_s
        for timeout in self.args.heartbeat_timeouts:
            found = await tradeoff(
                keel,
                self.meter,
                env,
                self.workdir,
                timeout,
                self.args.call_s,
                self.args.kill_at,
            )
            self.report.tradeoffs.append(found)
            if self.args.progress:
                ways = ", ".join(f"{r.handover} {r.recovery_s:.1f} s" for r in found.recoveries)
                print(
                    f"# heartbeat timeout {timeout:g} s: {found.actions.total:g} actions, "
                    f"recovery {ways}",
                    flush=True,
                )


async def run(args: argparse.Namespace) -> Report:
    """Every side asked for, on one fresh dev server; what they measured."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        async with ActionServer(workdir / "server") as server:
            bench = Bench(server, args, workdir)
            bench.report.header += [
                describe(server),
                f"per cycle = (turn of {args.cycles} tool cycles - turn of none) / "
                f"{args.cycles}; model calls {args.model_delays} s, tools {args.tool_delays} s",
            ]
            if "keel" in args.systems:
                await bench.keel()
            if "floor" in args.systems:
                await bench.floor()
            if "strands" in args.systems and args.strands != "skip":
                await bench.strands()
            if args.heartbeat_timeouts:
                await bench.heartbeats()
    return bench.report


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _names(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [x for x in text.split(",") if x]
        unknown = set(names) - set(choices)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {sorted(unknown)}; from {choices}")
        return names

    return parse


def parser() -> argparse.ArgumentParser:
    """The command line; ``--quick`` sets small sizes for whatever was not given."""
    parse = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parse.add_argument("--quick", action="store_true", help="a bounded run (about 4 minutes)")
    parse.add_argument("--cycles", type=int, default=2, help="tool cycles of the measured turn")
    parse.add_argument("--model-delays", type=_floats, help="s per model call (0.1,2,10)")
    parse.add_argument("--tool-delays", type=_floats, help="s per tool run (0.1,5)")
    parse.add_argument("--clients", type=_names(CLIENTS), default=list(CLIENTS))
    parse.add_argument("--systems", type=_names(SYSTEMS), default=list(SYSTEMS))
    parse.add_argument(
        "--strands",
        choices=["auto", "make", "skip"],
        default="auto",
        help="auto: run the peer when its venv is there; make: install it (pip) first",
    )
    parse.add_argument("--idle-s", type=float, help="idle window (5)")
    parse.add_argument("--parked-s", type=float, help="parked window, 0 for none (30)")
    parse.add_argument("--heartbeat-timeouts", type=_floats, help="s, none for '' (2,5,10,30)")
    parse.add_argument("--call-s", type=float, help="model call of the trade-off (10)")
    parse.add_argument("--kill-at", type=float, help="s into the call the worker dies (3)")
    parse.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parse.add_argument("--progress", action="store_true", help="a line per side as it ends")
    return parse


FULL = {
    "model_delays": [0.1, 2.0, 10.0],
    "tool_delays": [0.1, 5.0],
    "idle_s": 5.0,
    "parked_s": 30.0,
    "heartbeat_timeouts": [2.0, 5.0, 10.0, 30.0],
    "call_s": 10.0,
    "kill_at": 3.0,
}
QUICK = {
    "model_delays": [0.1, 2.0],
    "tool_delays": [0.1],
    "idle_s": 3.0,
    "parked_s": 10.0,
    "heartbeat_timeouts": [2.0, 10.0],
    "call_s": 10.0,
    "kill_at": 3.0,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, defaults filled from ``--quick``'s or the full run's."""
    args = parser().parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> None:
    """Run and print; write the markdown tables with ``--markdown``."""
    args = parse_args()
    report = asyncio.run(run(args))
    for line in lines(report):
        print(line)
    if args.markdown is not None:
        args.markdown.write_text(markdown(report))


if __name__ == "__main__":
    main()
