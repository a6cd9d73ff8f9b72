"""The figures of ``tests.benchmarks.actions``: ``figure[labels] value unit`` lines and markdown."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.benchmarks.action_meter import Actions
from tests.benchmarks.action_recovery import ACTIVITY_START, HANDOVERS, HEARTBEAT, Tradeoff
from tests.benchmarks.action_sides import Delays

# Short names of the action types in the markdown table.
SHORT = {
    "grpc_QueryWorkflow": "query",
    HEARTBEAT: "heartbeat",
    ACTIVITY_START: "activity",
    "command_UpsertWorkflowSearchAttributes": "upsert",
    "grpc_StartWorkflowExecution": "start",
    "grpc_ExecuteMultiOperation": "update-with-start",
    "message_UpdateWorkflowExecution_Acceptance": "update",
    "grpc_SignalWorkflowExecution": "signal",
    "command_StartTimer": "timer",
}


@dataclass
class Cycles:
    """One side's two turns: ``cycles`` tool cycles, and none."""

    system: str
    client: str
    delays: Delays
    cycles: int
    turn: Actions
    base: Actions

    @property
    def labels(self) -> str:
        """``system=keel,client=run,model_s=2,tool_s=0.1``."""
        return f"system={self.system},client={self.client},{self.delays.label}"

    def per_cycle(self) -> Actions:
        """(the turn's Actions - the no-cycle turn's) / cycles, by type."""
        types = set(self.turn) | set(self.base)
        return Actions(
            {t: (self.turn.get(t, 0) - self.base.get(t, 0)) / self.cycles for t in sorted(types)}
        )


@dataclass
class Report:
    """Everything one run measured."""

    header: list[str] = field(default_factory=list)
    cycles: list[Cycles] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    idle: tuple[Actions, float] | None = None
    parked: tuple[Actions, float] | None = None
    tradeoffs: list[Tradeoff] = field(default_factory=list)
    call_s: float = 0.0

    def floor_of(self, row: Cycles) -> Cycles | None:
        """The floor's row with the same delays."""
        for other in self.cycles:
            if other.system == "floor" and other.delays == row.delays:
                return other
        return None


def lines(report: Report) -> list[str]:
    """The figure lines."""
    out = [f"# {line}" for line in report.header]
    out += [f"# skipped: {reason}" for reason in report.skipped]
    if report.idle is not None:
        actions, seconds = report.idle
        out.append(f"idle_actions[window_s={seconds:.0f}] {actions.total:g} actions")
    for row in report.cycles:
        per = row.per_cycle()
        out.append(f"actions_per_cycle[{row.labels}] {per.total:.1f} actions")
        for kind, value in per.items():
            if value:
                out.append(f"actions_per_cycle[{row.labels},type={kind}] {value:.1f} actions")
        out.append(f"actions_per_turn[{row.labels},cycles={row.cycles}] {row.turn.total:g} actions")
        out.append(f"actions_per_turn[{row.labels},cycles=0] {row.base.total:g} actions")
        floor = report.floor_of(row)
        if row.system != "floor" and floor is not None:
            excess = per.total - floor.per_cycle().total
            out.append(f"per_cycle_over_floor[{row.labels}] {excess:+.1f} actions")
    if report.parked is not None:
        actions, seconds = report.parked
        out.append(f"parked_actions[window_s={seconds:.0f}] {actions.total:g} actions")
        out.append(f"parked_actions_per_hour {actions.total * 3600 / seconds:.0f} actions/h")
        out.append(f"parked_actions_per_day {actions.total * 86400 / seconds:.0f} actions/day")
    for t in report.tradeoffs:
        labels = f"heartbeat_timeout_s={t.heartbeat_timeout_s:g},call_s={report.call_s:g}"
        beats, starts = t.actions.get(HEARTBEAT, 0), t.actions.get(ACTIVITY_START, 0)
        out.append(f"heartbeats_per_call[{labels}] {beats:g} actions")
        out.append(f"call_actions[{labels}] {beats + starts:g} actions")
        out.append(f"turn_actions[{labels}] {t.actions.total:g} actions")
        for r in t.recoveries:
            each = f"{labels},handover={r.handover}"
            out.append(f"recovery_s[{each}] {r.recovery_s:.2f} s")
            out.append(f"turn_done_after_kill_s[{each}] {r.done_s:.2f} s")
            if r.worker_start_s is not None:
                out.append(f"new_worker_start_s[{each}] {r.worker_start_s:.2f} s")
    return out


def _types(actions: Actions) -> str:
    parts = [f"{SHORT.get(k, k)} {v:g}" for k, v in sorted(actions.items()) if round(v, 2)]
    return ", ".join(parts) or "none"


def markdown(report: Report) -> str:
    """The figures as markdown tables."""
    out = [f"<!-- {line} -->" for line in report.header]
    out += ["", "## Actions per agent cycle", ""]
    out += [
        "Per cycle = (Actions of a turn of C tool cycles - Actions of a turn of none) / C: "
        "one model call and one tool run, with the waiting client's own Actions while they "
        "run.",
        "",
        "| model call | tool | system | client | per cycle | - floor | by type, per cycle |",
        "|---:|---:|---|---|---:|---:|---|",
    ]
    for row in sorted(report.cycles, key=lambda r: (r.delays.model_s, r.delays.tool_s)):
        per = row.per_cycle()
        floor = report.floor_of(row)
        excess = (
            f"{per.total - floor.per_cycle().total:+.1f}"
            if floor is not None and row.system != "floor"
            else ""
        )
        out.append(
            f"| {row.delays.model_s:g} s | {row.delays.tool_s:g} s | {row.system} | "
            f"{row.client} | {per.total:.1f} | {excess} | {_types(per)} |"
        )
    out += ["", *(f"Skipped: {reason}" for reason in report.skipped)]
    if report.idle is not None or report.parked is not None:
        out += ["", "## A parked session", "", "| state | window | Actions | per hour | per day |"]
        out.append("|---|---:|---:|---:|---:|")
        for name, measured in (("idle worker, no session", report.idle), ("parked", report.parked)):
            if measured is not None:
                actions, seconds = measured
                hourly = actions.total * 3600 / seconds
                out.append(
                    f"| {name} | {seconds:.0f} s | {actions.total:g} | {hourly:.0f} | "
                    f"{hourly * 24:.0f} |"
                )
    if report.tradeoffs:
        out += [
            "",
            f"## Heartbeat timeout: Actions of a {report.call_s:g} s model call against recovery",
            "",
            "kill -> next attempt (kill -> turn done): `restart` a new worker where the dead one"
            " ran, `beside` a worker already running on its machine, `elsewhere` a new worker on"
            " another machine (only the heartbeat timeout tells Temporal)",
            "",
            "| heartbeat timeout | heartbeats | call's Actions | restart | beside | elsewhere | "
            "new worker up |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in report.tradeoffs:
            beats, starts = t.actions.get(HEARTBEAT, 0), t.actions.get(ACTIVITY_START, 0)
            ways = {r.handover: r for r in t.recoveries}
            cells = " | ".join(
                f"{ways[h].recovery_s:.1f} s ({ways[h].done_s:.1f} s)" if h in ways else ""
                for h in HANDOVERS
            )
            up = ways.get("restart")
            started = (
                "" if up is None or up.worker_start_s is None else f"{up.worker_start_s:.1f} s"
            )
            out.append(
                f"| {t.heartbeat_timeout_s:g} s | {beats:g} | {beats + starts:g} | {cells} | "
                f"{started} |"
            )
    return "\n".join(out) + "\n"
