"""``keel eval CASES... --model SPEC``: replay recorded cases with a new model, as tests.

Each CASE is a file ``keel export`` wrote (or a folder of them), or a session id. Each is
replayed (``KeelClient.replay``: a Keel session, through the same workflow code as
production, its tool calls answered from the recording) and passes when it did not diverge,
did not stop, and met its ``expect`` block. A progress bar on stderr, a table at the end
(``--json``: one object), JUnit XML with ``--junit``; exit 1 when a case fails, 2 on bad input
(a file that is not a case names the file and the field), before any replay runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.cli.eval_cases import CaseRun
    from keel.worker.cli.replay_access import RecordedAccess
    from keel.worker.client.agent_files import AgentFile
    from keel.worker.settings import Settings

# Replays run at once, by default.
CONCURRENCY = 4


async def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    """``keel eval CASES... --model SPEC``: replay each case; exit 1 when any fails."""
    import asyncio

    from keel.worker.cli.eval_cases import CaseRun, case_sources, label_runs, read_case
    from keel.worker.cli.eval_output import junit_xml, print_table, runs_json
    from keel.worker.cli.progress_bar import ProgressBar
    from keel.worker.cli.replay_access import (
        exported,
        local_model,
        recorded_access,
        replay_model,
        turn_timeout,
    )
    from keel.worker.cli.run_inputs import UsageError, agent_modules, mcp_servers

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    timeout = turn_timeout(args)
    model, agent = replay_model(args, settings)
    servers = mcp_servers(args.mcp, settings.environ)
    files, sessions = case_sources(args.cases)
    runs = [CaseRun(case=read_case(f), file=f) for f in files]
    started = time.monotonic()
    async with recorded_access(settings, create=not sessions) as access:
        keel = access.keel
        queues: dict[str, list[str]] = {}
        if sessions:
            async with access.reading(sessions):
                for session in sessions:
                    case, _ = await exported(keel, session, settings.keyring())
                    runs.append(CaseRun(case=case, file=None))
        model = local_model(model, access.connection)
        for run in runs:
            queue = await _queue(access, run)
            needs = queues.setdefault(queue, [])
            wanted = agent_modules(agent) if agent is not None else run.case.settings.tool_modules
            needs += [m for m in wanted if m not in needs]
        label_runs(runs)
        bar = ProgressBar(sys.stderr, "evaluating")
        bar.show(0, len(runs))
        lanes = asyncio.Semaphore(args.concurrency)
        done = 0

        async def one(run: CaseRun) -> None:
            nonlocal done
            async with lanes:
                await replay_case(access, run, args, model, agent, timeout)
            done += 1
            bar.show(done, len(runs))

        async with access.replay_workers(queues, servers, what="the cases"):
            try:
                async with asyncio.TaskGroup() as group:
                    for run in runs:
                        group.create_task(one(run))
            except BaseExceptionGroup as failed:  # what stops every case: told as keel tells it
                raise failed.exceptions[0] from None
        bar.close()
    seconds = time.monotonic() - started
    if args.junit:
        try:
            Path(args.junit).write_text(junit_xml(runs, seconds), encoding="utf-8")
        except OSError as err:
            raise UsageError(f"--junit {args.junit}: cannot write: {err.strerror or err}") from err
    if args.json:
        print(json.dumps(runs_json(runs, model, seconds, args.concurrency), ensure_ascii=False))
    else:
        print_table(runs, seconds, args.concurrency)
    return EXIT_OK if all(run.passed for run in runs) else EXIT_FAILED


async def replay_case(
    access: RecordedAccess,
    run: CaseRun,
    args: argparse.Namespace,
    model: str,
    agent: AgentFile | None,
    timeout: float,
) -> None:
    """Replay one case, and check its expectations if the replay reached its end."""
    from keel.worker.client.errors import RequestRejected
    from keel.worker.client.expectations import check_expectations

    began = time.monotonic()
    try:
        run.report = await access.keel.replay(
            run.case,
            model=model,
            config=agent.config if agent is not None else None,
            system=args.system,
            live_read=args.live_read,
            turn_timeout_s=timeout,
            task_queue=await _queue(access, run),
        )
    except TimeoutError as err:
        run.error = f"gave up after {timeout:g} s: {err}"
    except RequestRejected as err:
        run.error = f"the replay was refused: {err}"
    run.seconds = time.monotonic() - began
    if run.complete and run.case.expect is not None:
        run.checks = check_expectations(run.case.expect, run.report)  # type: ignore[arg-type]


async def _queue(access: RecordedAccess, run: CaseRun) -> str:
    """A case's task queue: its recorded session's for a session id, else the client's."""
    if run.file is None and run.case.session is not None:
        return await access.keel.session_task_queue(run.case.session)
    return access.keel.task_queue


def add_parser(sub: flags.Subparsers) -> None:
    """``keel eval``, on ``keel``'s subparsers."""
    from keel.worker.cli.replaying import replay_flags

    cmd = sub.add_parser(
        "eval",
        help="replay recorded cases with a new model: divergences and expectations, as tests",
        description="Replay each case (a file from keel export, a folder of them, or a "
        "session id) with the new model, no tool run; a case fails when it diverges, stops, "
        "or misses its expect block. Progress on stderr, a table at the end, JUnit XML with "
        "--junit. Exit 1 when a case fails, 2 on bad input. See docs/evaluation.md.",
    )
    cmd.add_argument(
        "cases", nargs="+", metavar="CASE", help="a case file, a folder of them, or a session id"
    )
    replay_flags(cmd)
    cmd.add_argument(
        "--junit", metavar="FILE", help="write JUnit XML to FILE: one testcase per case"
    )
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        metavar="N",
        help=f"replays run at once (default {CONCURRENCY})",
    )
    cmd.set_defaults(handler=cmd_eval)
