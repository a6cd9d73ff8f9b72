"""Agent files: a session's settings, and its sub-agents, in a TOML file.

``keel run --agent FILE.toml`` and ``load_agent_file`` read them. Keys (all optional)::

    model, system, tools, require_approval, approvers, approval_timeout_s, max_cycles,
    turn_token_budget, token_budget, turn_cost_budget, cost_budget, on_budget (ask | fail),
    price, model_retry_s, heartbeat_timeout_s, context_messages, output_schema, notify,
    judge, judge_model, [judge_criteria.TOOL], sub_agent_judge_may_approve,
    effects (tool name -> read | idempotent | write),
    escalate (a list of {after_s = SECONDS, approvers = [ID, ...]}),
    [agents.NAME] (+ description)

``price = {input = 3, output = 15}`` (US dollars per million input and output tokens)
becomes ``SessionConfig.price``, over the workers' price table; a sub-agent without its own
runs at its parent's when it runs the same model (``keel.workflows.child_budgets``).
``effects`` becomes ``SessionConfig.tool_effects``; a sub-agent's table inherits its parent's
and may set its own, tool by tool (a tool's class is a fact about the tool, not a rule).

A sub-agent's table is checked against its parent's as its session will be
(``keel.workflows.inheritance``): a sub-agent that would add or change a judge, give criteria
its parent's judge has none for, or widen who may decide is an error naming its key.

A problem is an ``AgentFileError`` naming the file, the line and the key (``tomllib`` gives no
line numbers for keys, so the key's line is found by scanning the file's text).
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from keel.activities.models import ModelSpecError, check_model_spec
from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.errors import AgentFileError
from keel.worker.client.paths import local_path, sendable_model_spec
from keel.workflows.boundary import InputRejected
from keel.workflows.budget_contracts import ModelPrice
from keel.workflows.contracts import Effect, JudgeCriteria, SessionConfig, SubAgent, notify_urls
from keel.workflows.effect_tables import EffectTableError, effect_table, narrowed
from keel.workflows.escalation_contracts import EscalationStep, escalation_problem
from keel.workflows.inheritance import child_config
from keel.workflows.structured import OUTPUT_TOOL

# A sub-agent may have sub-agents of its own, down to this depth (the file's agent is 0).
MAX_AGENT_DEPTH = 2
# Sub-agents are offered to the model as tools: their names must be tool names.
# The most an agent file, or a schema file it names, may take.
MAX_FILE_BYTES = 1_000_000
AGENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
# The keys a sub-agent's refusal by ``child_config`` may name, most specific first.
_RULE_KEYS = ("escalate", "judge_criteria", "judge_model", "judge", "approver_keys", "approvers")


class _AgentTable(BaseModel):
    """One agent's table, as the file spells it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    description: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    system: str | None = None
    tools: list[str] | None = None
    require_approval: list[str] | None = None
    approvers: list[str] | None = None
    approval_timeout_s: float | None = Field(default=None, gt=0)
    max_cycles: int | None = Field(default=None, gt=0)
    turn_token_budget: int | None = Field(default=None, gt=0)
    token_budget: int | None = Field(default=None, gt=0)
    turn_cost_budget: float | None = Field(default=None, gt=0)
    cost_budget: float | None = Field(default=None, gt=0)
    on_budget: Literal["ask", "fail"] | None = None
    price: ModelPrice | None = None
    model_retry_s: float | None = Field(default=None, gt=0)
    heartbeat_timeout_s: float | None = Field(default=None, ge=0.5, le=600)
    context_messages: int | None = Field(default=None, ge=2)
    output_schema: dict[str, Any] | str | None = None
    notify: list[str] | None = None
    judge: str | None = None
    judge_model: str | None = Field(default=None, min_length=1)
    judge_criteria: dict[str, JudgeCriteria] = Field(default_factory=dict)
    sub_agent_judge_may_approve: bool = False
    effects: dict[str, Any] = Field(default_factory=dict)
    escalate: list[EscalationStep] | None = None
    agents: dict[str, _AgentTable] = Field(default_factory=dict)

    @field_validator("notify")
    @classmethod
    def _http_urls(cls, urls: list[str] | None) -> list[str] | None:
        return None if urls is None else notify_urls(urls)


class SubAgentFile(BaseModel):
    """A sub-agent of an agent file: offered to its parent's model as tool ``name``."""

    name: str
    description: str
    config: SessionConfig
    agents: dict[str, SubAgentFile] = Field(default_factory=dict)


class AgentFile(BaseModel):
    """What an agent file defines: the session's configuration and its sub-agents."""

    path: Path
    config: SessionConfig
    agents: dict[str, SubAgentFile] = Field(default_factory=dict)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of each table header and key of a TOML text, by its dotted path."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = re.match(r"^\[\[?([^\]]+)\]\]?", line)
        if header:
            table = _dotted(header.group(1))
            lines.setdefault(table, number)
            continue
        key = re.match(r"^([A-Za-z0-9_\-.\"' ]+?)\s*=", line)
        if key:
            path = table + _dotted(key.group(1))
            for end in range(len(table) + 1, len(path) + 1):
                lines.setdefault(path[:end], number)
    return lines


def _dotted(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in key.split("."))


class _Reader:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = key_lines(text)

    def fail(self, where: tuple[str | int, ...], what: str) -> AgentFileError:
        """An error naming the key at ``where`` and its line (or the nearest enclosing one)."""
        parts = tuple(str(p) for p in where)
        line = None
        for end in range(len(parts), 0, -1):
            line = self.lines.get(parts[:end])
            if line is not None:
                break
        key = ".".join(parts) or "(file)"
        at = f"{self.path}:{line}" if line is not None else str(self.path)
        return AgentFileError(f"{at}: {key}: {what}" + (f" (line {line})" if line else ""))

    def schema(self, value: dict[str, Any] | str, where: tuple[str, ...]) -> dict[str, Any]:
        if isinstance(value, str):
            file = local_path(value, cwd=self.path.parent)
            try:
                loaded = json.loads(_read_text(file))
            except OSError as err:
                raise self.fail(where, f"cannot read {file}: {err.strerror or err}") from err
            except json.JSONDecodeError as err:
                raise self.fail(where, f"{file} is not valid JSON: {err}") from err
            except ValueError as err:  # not UTF-8, or too large
                raise self.fail(where, f"{file}: {err}") from err
            value = loaded
        try:
            check_output_schema(value)
        except OutputSchemaError as err:
            raise self.fail(where, str(err)) from err
        assert isinstance(value, dict)
        return value

    def config(
        self,
        table: _AgentTable,
        where: tuple[str, ...],
        model: str | None,
        effects: dict[str, Effect] | None = None,
    ) -> SessionConfig:
        """One table's session configuration; ``effects``: its parent's, which it inherits."""
        model = table.model or model
        if model is None:
            raise self.fail(where + ("model",), "no model: set model here, or pass --model")
        if table.judge is not None:
            self.check_judge(table.judge, where + ("judge",))
        for key, spec in (("model", model), ("judge_model", table.judge_model)):
            try:
                if spec is not None:
                    check_model_spec(spec)
            except ModelSpecError as err:
                raise self.fail(where + (key,), str(err)) from err
        settings: dict[str, Any] = {
            "model": sendable_model_spec(model, cwd=self.path.parent),
            "system": table.system,
            "tool_modules": table.tools or [],
            "approval_tools": table.require_approval or [],
            "approvers": table.approvers or [],
            "approval_timeout_s": table.approval_timeout_s,
            "max_cycles_per_turn": table.max_cycles,
            "max_turn_tokens": table.turn_token_budget,
            "max_session_tokens": table.token_budget,
            "max_turn_cost_usd": table.turn_cost_budget,
            "max_session_cost_usd": table.cost_budget,
            "on_budget": table.on_budget,
            "price": table.price,
            "model_retry_s": table.model_retry_s,
            "heartbeat_timeout_s": table.heartbeat_timeout_s,
            "context_messages": table.context_messages,
            "notify": table.notify or [],
            "judge": table.judge,
            "judge_model": (
                sendable_model_spec(table.judge_model, cwd=self.path.parent)
                if table.judge_model
                else None
            ),
            "judge_criteria": table.judge_criteria,
            "sub_agent_judge_may_approve": table.sub_agent_judge_may_approve,
            "tool_effects": self.inherited_effects(effects or {}, table, where),
        }
        settings["escalate"] = table.escalate or []
        problem = escalation_problem(
            settings["escalate"], settings["approvers"], {}, settings["approval_timeout_s"]
        )
        if problem is not None:
            raise self.fail(where + ("escalate",), problem)
        # a bound the file does not set keeps SessionConfig's default (None would lift it)
        for bound in ("max_cycles_per_turn", "max_turn_tokens", "model_retry_s", "on_budget"):
            if settings[bound] is None:
                del settings[bound]
        if table.output_schema is not None:
            settings["output_schema"] = self.schema(table.output_schema, where + ("output_schema",))
        return SessionConfig(**settings)

    def inherited_effects(
        self, parent: dict[str, Effect], table: _AgentTable, where: tuple[str, ...]
    ) -> dict[str, Effect]:
        """A table's ``effects`` over its parent's: as careful or more, never less."""
        own = self.effects(table, where)
        try:
            return narrowed(parent, own, where[-1] if where else "")
        except EffectTableError as err:
            raise self.fail(where + ("effects", err.tool), str(err)) from err

    def effects(self, table: _AgentTable, where: tuple[str, ...]) -> dict[str, Effect]:
        """A table's ``effects``, checked: tool names, each ``read``, ``idempotent``, ``write``."""
        try:
            return effect_table(table.effects)
        except EffectTableError as err:
            raise self.fail(where + ("effects", err.tool), str(err)) from err

    def check_judge(self, judge: str, where: tuple[str, ...]) -> None:
        """Refuse a judge that can never be one: not ``module:function``, or Python's own."""
        module, colon, function = judge.partition(":")
        if not colon or not module or not function:
            raise self.fail(where, f"judge {judge!r} is not module:function")
        if module.split(".")[0] in sys.stdlib_module_names:
            raise self.fail(
                where,
                f"judge {judge!r} is in Python's standard library: a judge is a @judge "
                "function in a module the worker is given (--tools)",
            )

    def inherit(
        self, parent: SessionConfig, agents: dict[str, SubAgentFile], where: tuple[str, ...]
    ) -> None:
        """Check each sub-agent's table against its parent's, as its session will be."""
        for name, sub in agents.items():
            at = (*where, "agents", name)
            try:
                narrowed = child_config(parent, sub.config, name)
            except InputRejected as err:
                text = str(err)
                key = next((k for k in _RULE_KEYS if k in text), None)
                raise self.fail(at + ((key,) if key else ()), text) from err
            self.inherit(narrowed, sub.agents, at)

    def agents(
        self,
        table: _AgentTable,
        where: tuple[str, ...],
        model: str | None,
        ancestors: list[str],
        effects: dict[str, Effect],
    ) -> dict[str, SubAgentFile]:
        found: dict[str, SubAgentFile] = {}
        for name, sub in table.agents.items():
            at = (*where, "agents", name)
            if not AGENT_NAME.match(name) or name == OUTPUT_TOOL:
                raise self.fail(at, "a sub-agent's name must be a tool name (letters, digits, _ -)")
            if name in ancestors:
                raise self.fail(at, f"sub-agent {name!r} is nested in itself")
            if len(ancestors) + 1 > MAX_AGENT_DEPTH:
                raise self.fail(at, f"sub-agents nested deeper than {MAX_AGENT_DEPTH} levels")
            if sub.description is None:
                raise self.fail(at + ("description",), "a sub-agent needs a description")
            if table.approvers and sub.approvers and not set(sub.approvers) & set(table.approvers):
                raise self.fail(
                    at + ("approvers",),
                    "a sub-agent inherits its parent's approvers and may only narrow them: "
                    f"none of {sub.approvers} is among {table.approvers}",
                )
            sub_model = sub.model or model
            config = self.config(sub, at, sub_model, effects)
            agents = self.agents(sub, at, sub_model, [*ancestors, name], config.tool_effects)
            config = config.model_copy(update={"agents": sub_agents(agents)})
            found[name] = SubAgentFile(
                name=name, description=sub.description, config=config, agents=agents
            )
        return found


def _read_text(file: Path) -> str:
    """A file's text: UTF-8, at most ``MAX_FILE_BYTES`` (no more is read).

    Raises:
        OSError: it cannot be read.
        ValueError: it is larger, or not UTF-8, saying which.
    """
    with file.open("rb") as opened:
        data = opened.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"the file is over the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = data[err.start : err.start + 1]
        raise ValueError(f"not UTF-8 text (byte {byte!r} at offset {err.start})") from None


def load_agent_file(path: str | Path, *, model: str | None = None) -> AgentFile:
    """Read an agent file.

    Args:
        path: the TOML file; relative paths inside it (``output_schema``, a scripted model)
            are relative to its directory.
        model: the model to use where the file names none (``--model``, ``KEEL_MODEL``).

    Raises:
        AgentFileError: naming the file, the line and the key.
    """
    file = local_path(str(path))
    try:
        text = _read_text(file)
    except OSError as err:
        raise AgentFileError(f"{file}: cannot read: {err.strerror or err}") from err
    except ValueError as err:
        raise AgentFileError(f"{file}: {err}") from err
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise AgentFileError(f"{file}: not valid TOML: {err}") from err
    reader = _Reader(file, text)
    try:
        table = _AgentTable.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        loc = tuple(p for p in first["loc"] if not _is_union_tag(p))
        what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise reader.fail(loc, what) from err
    if table.description is not None:
        raise reader.fail(("description",), "only a sub-agent ([agents.NAME]) has a description")
    try:
        config = reader.config(table, (), model)
        agents = reader.agents(table, (), table.model or model, [], config.tool_effects)
    except ValidationError as err:  # a setting SessionConfig refuses
        raise AgentFileError(f"{file}: {err}") from err
    config = config.model_copy(update={"agents": sub_agents(agents)})
    reader.inherit(config, agents, ())
    return AgentFile(path=file, config=config, agents=agents)


def sub_agents(agents: dict[str, SubAgentFile]) -> dict[str, SubAgent]:
    """The ``SessionConfig.agents`` of an agent file's sub-agents."""
    return {n: SubAgent(description=a.description, config=a.config) for n, a in agents.items()}


def _is_union_tag(part: str | int) -> bool:
    """Pydantic's names for a union's branches in an error location (``str``, ``dict[...]``)."""
    return isinstance(part, str) and (part in ("str", "int", "float") or "[" in part)
