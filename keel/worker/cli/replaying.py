"""``keel replay``, ``keel fork`` and ``keel export``: a recorded session as a test.

- ``keel replay SESSION --model SPEC`` runs the session's prompts again, turn by turn, in a
  new session with another model or agent file; each tool call is answered from the
  recording (no tool runs), and the first that matches none is the divergence (exit 1);
- ``keel fork SESSION --at N`` starts a new session whose conversation is the session's
  first N messages, running nothing; ``keel run --session NEW`` goes on from there;
- ``keel export SESSION`` writes the recording as one JSON case, for ``keel eval``.

See docs/evaluation.md. Each command is a coroutine ``(args, settings) -> exit code``;
``add_parser`` adds their parsers to ``keel``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.client.replays import ReplayCase, ReplayReport
    from keel.worker.settings import Settings
    from keel.workflows.messages import ToolUse

# How much of a tool input a line of ``keel replay`` shows.
INPUT_CHARS = 160


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    """``keel replay SESSION --model SPEC``: replay with no tool run; exit 1 when it diverged."""
    from keel.worker.cli.replay_access import (
        exported,
        local_model,
        recorded_access,
        replay_model,
        turn_timeout,
    )
    from keel.worker.cli.run_inputs import agent_modules, mcp_servers

    timeout = turn_timeout(args)
    model, agent = replay_model(args, settings)
    servers = mcp_servers(args.mcp, settings.environ)
    async with recorded_access(settings) as access:
        keel = access.keel
        async with access.reading([args.session]):
            case, _ = await exported(keel, args.session, settings.keyring())
        queue = await keel.session_task_queue(args.session)
        model = local_model(model, access.connection)
        modules = agent_modules(agent) if agent is not None else case.settings.tool_modules
        async with access.replay_workers({queue: modules}, servers, what=args.session):
            try:
                report = await keel.replay(
                    case,
                    model=model,
                    config=agent.config if agent is not None else None,
                    system=args.system,
                    live_read=args.live_read,
                    turn_timeout_s=timeout,
                    task_queue=queue,
                )
            except TimeoutError as err:
                print(f"keel: the replay gave up after {timeout:g} s: {err}", file=sys.stderr)
                return EXIT_FAILED
    if args.json:
        print(json.dumps(report.as_json(), ensure_ascii=False))
    else:
        for line in report_lines(case, report, model):
            print(line)
    return EXIT_FAILED if report.diverged or report.stopped else EXIT_OK


def report_lines(case: ReplayCase, report: ReplayReport, model: str) -> list[str]:
    """What ``keel replay`` prints for a person: each turn recorded and replayed, the end."""
    lines = [
        f"replay of session {report.session} with {model} in session {report.replay_session} "
        f"({len(case.turns)} turn(s) recorded)"
    ]
    prompts = {t.turn: " ".join(b.text for b in t.prompt if b.text) for t in case.turns}
    for turn in report.turns:
        lines += [
            "",
            f"turn {turn.turn}: {one_line(prompts.get(turn.turn, ''))}",
            f"  recorded calls:  {calls_text(turn.recorded_calls)}",
            f"  replayed calls:  {calls_text(turn.replayed_calls)}",
            f"  recorded answer: {one_line(turn.recorded_answer)}",
            f"  replayed answer: {one_line(turn.replayed_answer or '')}",
        ]
    lines.append("")
    if report.divergence is not None:
        lines.append(divergence_text(report))
    elif report.stopped:
        lines.append(f"STOPPED: {report.stopped}")
    else:
        lines.append(
            f"no divergence: {len(report.turns)} turn(s) replayed, each tool call answered "
            "from the recording"
        )
    recorded = report.recorded_usage.totalTokens if report.recorded_usage else None
    lines.append(
        f"tokens: recorded {recorded if recorded is not None else '?'}, replayed "
        f"{report.replayed_usage.totalTokens}; {report.seconds:.2f} s"
    )
    return lines


def divergence_text(report: ReplayReport) -> str:
    """``DIVERGED at turn T, call C: ...``: the new call, and the recorded one expected."""
    d = report.divergence
    assert d is not None
    expected = (
        f"the recording's next call was {use_text(d.recorded)}"
        if d.recorded is not None
        else "the recording's turn made no more calls"
    )
    return (
        f"DIVERGED at turn {d.turn}, call {d.index + 1}: the new model called "
        f"{use_text(d.replayed)}; {expected}"
    )


def calls_text(uses: list[ToolUse]) -> str:
    """Tool calls in one line: ``name {input}, ...``, or ``none``."""
    return ", ".join(use_text(u) for u in uses) or "none"


def use_text(use: ToolUse) -> str:
    """One tool call: its name and compact input (cut at ``INPUT_CHARS``)."""
    text = json.dumps(use.input, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    if len(text) > INPUT_CHARS:
        text = text[:INPUT_CHARS] + "…"
    return f"{use.name} {text}"


def one_line(text: str) -> str:
    """A text on one line: its line breaks as ``⏎``."""
    return " ⏎ ".join(text.strip().splitlines()) or "(none)"


async def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    """``keel fork SESSION --at N``: a new session with its first N messages; nothing runs."""
    from keel.worker.cli.replay_access import check_key, local_model, recorded_access
    from keel.worker.cli.run_inputs import UsageError, check_model_given
    from keel.worker.shell import command, session_id_problem

    if args.new_session is not None:
        problem = session_id_problem(args.new_session, new=True)
        if problem is not None:
            raise UsageError(f"--session: {problem}")
    check_model_given(args.model, None)
    changes: dict[str, Any] = {}
    if args.system is not None:
        changes["system"] = args.system
    async with recorded_access(settings) as access:
        if args.model:
            changes["model"] = local_model(args.model, access.connection)
        async with access.reading([args.session]):
            await check_key(access.keel, args.session, settings.keyring())
            fork = await access.keel.fork(
                args.session, args.at, new_session=args.new_session, **changes
            )
    go_on = command("keel", "run", "--session", fork) + " 'your prompt'"
    if args.json:
        print(
            json.dumps(
                {
                    "session": args.session,
                    "fork": fork,
                    "at": args.at,
                    "changed": sorted(changes),
                    "command": go_on,
                }
            )
        )
        return EXIT_OK
    changed = f", with a new {' and '.join(sorted(changes))}" if changes else ""
    print(
        f"session {fork}: the first {args.at} message(s) of {args.session}{changed}; nothing "
        f"ran, and {args.session} is unchanged"
    )
    print(f"go on with: {go_on}")
    return EXIT_OK


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    """``keel export SESSION [--out FILE]``: the recording as one JSON case."""
    from pathlib import Path

    from keel.worker.cli.replay_access import exported, recorded_access
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.client.paths import local_path
    from keel.worker.client.replays import CaseExpectation

    out: Path | None = None
    if args.out is not None:
        out = local_path(args.out)
        if out.exists():
            raise UsageError(f"--out {args.out}: {out} exists; not overwritten (remove it first)")
    async with recorded_access(settings) as access:
        async with access.reading([args.session]):
            case, encrypted = await exported(access.keel, args.session, settings.keyring())
    if args.name:
        case.name = args.name
    if case.expect is None:
        case.expect = CaseExpectation()  # the block a user fills, shown empty
    text = json.dumps(case.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        try:
            with out.open("x", encoding="utf-8") as file:
                file.write(text)
        except FileExistsError:
            raise UsageError(f"--out {args.out}: {out} exists; not overwritten") from None
        except OSError as err:
            raise UsageError(
                f"--out {args.out}: cannot write {out}: {err.strerror or err}"
            ) from err
        calls = sum(len(t.calls) for t in case.turns)
        print(
            f"wrote case {case.name!r} to {out}: {len(case.turns)} turn(s), {calls} tool "
            f"call(s); fill its expect block, then: keel eval {args.out} --model SPEC",
            file=sys.stderr,
        )
    if encrypted:
        print(
            f"keel: note: session {args.session} is encrypted; the case holds it decrypted "
            "(keep it as you keep the conversation)",
            file=sys.stderr,
        )
    return EXIT_OK


def add_parser(sub: flags.Subparsers) -> None:
    """``keel replay``, ``keel fork`` and ``keel export``, on ``keel``'s subparsers."""
    replay = sub.add_parser(
        "replay",
        help="run a recorded session's prompts again with another model; no tool runs",
        description="Run SESSION's user prompts again, turn by turn, in a new session with "
        "another model or agent file. Each tool call is answered from the recording when it "
        "matches a recorded call of its turn (same tool, same input): no tool runs. The first "
        "call that matches none is the divergence, and the replay stops there. Exit 0: no "
        "divergence; 1: diverged (or stopped); 2: bad input. See docs/evaluation.md.",
    )
    replay.add_argument("session", type=flags.session_id)
    replay_flags(replay)
    replay.add_argument(
        "--json", action="store_true", help="print one JSON object (the replay's report)"
    )
    replay.set_defaults(handler=cmd_replay)

    fork = sub.add_parser(
        "fork",
        help="start a new session from a session's first N messages; nothing runs",
        description="A new session whose conversation is SESSION's first N messages, with "
        "its settings (approvers, keys, gated tools, tools ...) but for --model and --system. "
        "Nothing runs, and SESSION is unchanged; `keel run --session NEW PROMPT` goes on.",
    )
    fork.add_argument("session", type=flags.session_id)
    fork.add_argument(
        "--at",
        type=int,
        required=True,
        metavar="N",
        help="keep the first N messages (not ending on a tool use without its result)",
    )
    fork.add_argument(
        "--session",
        dest="new_session",
        metavar="NEW",
        help="the new session's id (default SESSION/fork-<hex>)",
    )
    fork.add_argument("--model", help="the new session's model (default: SESSION's)")
    fork.add_argument("--system", help="the new session's system prompt (default: SESSION's)")
    fork.add_argument("--json", action="store_true", help="print one JSON object")
    fork.set_defaults(handler=cmd_fork)

    export = sub.add_parser(
        "export",
        help="write a recorded session as one JSON case, for keel eval",
        description="Write SESSION's recording as one self-contained JSON case: its prompts, "
        "tool calls with their results, answers, settings and an empty expect block to fill. "
        "An encrypted session is read with KEEL_ENCRYPTION_KEY and written decrypted.",
    )
    export.add_argument("session", type=flags.session_id)
    export.add_argument(
        "--out", metavar="FILE", help="write to FILE (never over one) instead of stdout"
    )
    export.add_argument("--name", help="the case's name (default: the session id)")
    export.set_defaults(handler=cmd_export)


def replay_flags(cmd: argparse.ArgumentParser) -> None:
    """The flags ``keel replay`` and ``keel eval`` share: the model, agent, live reads."""
    cmd.add_argument(
        "--model", help="the model spec to replay with (default: the --agent file's model)"
    )
    cmd.add_argument(
        "--agent", metavar="FILE.toml", help="replay with this agent file's settings instead"
    )
    cmd.add_argument("--system", help="replay with this system prompt")
    cmd.add_argument(
        "--live-read",
        action="store_true",
        help="let a read tool whose call matches no recorded one run live (never a write or "
        "idempotent tool)",
    )
    cmd.add_argument(
        "--turn-timeout",
        type=float,
        metavar="SECONDS",
        help="give up on a replayed turn after this long (default 600)",
    )
    flags.mcp_flag(cmd, embedded=True)
