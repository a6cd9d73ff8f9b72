"""Drift: what an open session recorded, against the tools and agent file installed here.

Replaying a history (``keel.worker.process.replay_check``) checks the workflow code only.
A session also depends on what it was told and what it did: the tools it was offered (their
terms are in its history, their descriptions and input schemas in the store under its
``tools_digest``), the inputs its model gave them, and its configuration (the system prompt
it started with stays its own). ``read_recorded`` takes these from the history the check
fetched, decoded with the configured keys; ``DriftCheck.drift_of`` compares them with the tool
modules loaded here (``--tools``) and, when given, an agent file (``--agent FILE``).

Kinds, ``drift`` (counts for ``--strict``) unless marked ``info``:

- ``tool_removed``: a tool the session was offered (or called) is gone, though the module
  that provided it is loaded here;
- ``module_missing``: a module the session's tools came from is not loaded here at all;
- ``input_rejected``: a recorded input the installed tool's input model rejects, as the
  worker validates it before running the tool;
- ``effect_changed``: the tool's effect class changed (unless the session sets its own);
- ``approval_changed``: whether the tool needs approval changed: the open session keeps the
  rule it recorded;
- ``system_changed``: the agent file's system prompt differs from the session's;
- ``description_changed``, ``schema_changed`` (``info``): the session's model still sees the
  recorded description or schema (needs the store);
- ``agent_changed`` (``info``): other settings of the agent file differ from the session's;
- ``unreadable``: the recorded data could not be read.

Tools from MCP servers and those the workflow offers itself (sub-agents, ``final_result``)
are not compared.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from keel.activities.store import ConversationStore
from keel.activities.tools import RegisteredTool, registered_tools
from keel.workflows.activity_options import MODEL_ACTIVITY, TOOL_ACTIVITY
from keel.workflows.contracts import SessionConfig

DriftLevel = Literal["drift", "info"]
MCP_PREFIX = "mcp:"
# The longest a name or a detail is printed: a hostile history does not flood the report.
_NAME_CHARS = 80
_DETAIL_CHARS = 300
# The agent file's settings compared beside its system prompt are those the file sets.
_NOT_COMPARED = frozenset({"system"})


@dataclass(frozen=True)
class Drift:
    """One difference between what a session recorded and what is installed here.

    Attributes:
        kind: ``tool_removed``, ``input_rejected``, ... (the module's docstring lists them).
        tool: the tool concerned, if one is.
        detail: what differs, on one line.
        level: ``drift`` (fails ``keel deploy check --strict``) or ``info``.
    """

    kind: str
    tool: str | None
    detail: str
    level: DriftLevel = "drift"


@dataclass
class Recorded:
    """What one run's history says the session was given and did.

    Attributes:
        config: the session's configuration, as JSON (``SessionInput.config``).
        child: a sub-agent's session (``SessionInput.parent_session``).
        tools: the terms of the tools it was offered, by name (``ModelResponse.tools``, or the
            carried ``Ledger.tools``).
        tools_digest: where its whole tool specs are stored.
        uses: the tool uses its model made, by toolUseId: (name, input).
    """

    config: dict[str, Any] | None = None
    child: bool = False
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools_digest: str | None = None
    uses: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def take_messages(self, messages: Any) -> None:
        """Note the toolUse blocks of a list of messages (as JSON)."""
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else ():
                use = block.get("toolUse") if isinstance(block, dict) else None
                self.take_use(use)

    def take_use(self, use: Any) -> None:
        """Note one toolUse (as JSON); anything not shaped like one is ignored."""
        if not isinstance(use, dict):
            return
        use_id, name = use.get("toolUseId"), use.get("name")
        if isinstance(use_id, str) and isinstance(name, str):
            self.uses[use_id] = (name, use.get("input"))

    def take_tools(self, tools: Any, digest: Any) -> None:
        """Note the tool terms a model call described, and their digest."""
        for spec in tools if isinstance(tools, list) else ():
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                self.tools[spec["name"]] = spec
        if isinstance(digest, str):
            self.tools_digest = digest


async def read_recorded(history: WorkflowHistory, converter: DataConverter) -> Recorded:
    """What ``history`` recorded: its start input, model results and tool requests.

    Raises:
        Exception: a payload could not be decoded (no key here, not JSON).
    """
    recorded = Recorded()
    kinds: list[str] = []
    payloads: list[Any] = []
    types: dict[int, str] = {}
    for event in history.events:
        if event.HasField("workflow_execution_started_event_attributes"):
            given = event.workflow_execution_started_event_attributes.input.payloads
            kinds += ["start"] * len(given[:1])
            payloads += given[:1]
        elif event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            types[event.event_id] = scheduled.activity_type.name
            if scheduled.activity_type.name == TOOL_ACTIVITY:
                kinds += ["tool"] * len(scheduled.input.payloads[:1])
                payloads += scheduled.input.payloads[:1]
        elif event.HasField("activity_task_completed_event_attributes"):
            completed = event.activity_task_completed_event_attributes
            if types.get(completed.scheduled_event_id) == MODEL_ACTIVITY:
                kinds += ["model"] * len(completed.result.payloads[:1])
                payloads += completed.result.payloads[:1]
    values = await converter.decode(payloads) if payloads else []
    for kind, value in zip(kinds, values, strict=True):
        if not isinstance(value, dict):
            continue
        if kind == "start":
            _take_start(recorded, value)
        elif kind == "tool":
            recorded.take_use(value.get("tool_use"))
        else:
            recorded.take_tools(value.get("tools"), value.get("tools_digest"))
            recorded.take_messages([value.get("message")])
    return recorded


def _take_start(recorded: Recorded, start: dict[str, Any]) -> None:
    config = start.get("config")
    recorded.config = config if isinstance(config, dict) else None
    recorded.child = bool(start.get("parent_session"))
    recorded.take_messages(start.get("messages"))
    carried = start.get("carried")
    if isinstance(carried, dict):
        recorded.take_tools(carried.get("tools"), carried.get("tools_digest"))
        recorded.take_messages(carried.get("messages"))


@dataclass
class DriftCheck:
    """What sessions are compared with: the tool modules loaded here and an agent file.

    Attributes:
        modules: the tool modules loaded (``load_tool_modules``); empty: tools not compared.
        agent: the agent file's configuration; None: settings not compared.
        agent_name: how the report names the agent file.
        store: the conversation store holding the sessions' whole tool specs; None:
            descriptions and schemas not compared.
    """

    modules: Sequence[str] = ()
    agent: SessionConfig | None = None
    agent_name: str = "the agent file"
    store: ConversationStore | None = None
    _specs: dict[str, dict[str, dict[str, Any]] | None] = field(default_factory=dict)

    async def drift_of(self, recorded: Recorded) -> list[Drift]:
        """Every drift of one session, tools first, in the order they were offered."""
        found: list[Drift] = []
        if self.modules:
            full = await self._full_specs(recorded.tools_digest)
            found += self._tool_drift(recorded, full)
        if self.agent is not None and recorded.config is not None and not recorded.child:
            found += self._agent_drift(recorded.config, self.agent)
        return found

    def _covered(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def _tool_drift(
        self, recorded: Recorded, full: dict[str, dict[str, Any]] | None
    ) -> list[Drift]:
        installed = registered_tools()
        config = recorded.config or {}
        overridden = _dict(config.get("tool_effects"))
        asked = {t for t in _list(config.get("approval_tools")) if isinstance(t, str)}
        calls: dict[str, list[Any]] = {}
        for name, given in recorded.uses.values():
            calls.setdefault(name, []).append(given)
        found: list[Drift] = []
        missing: dict[str, list[str]] = {}
        for name, terms in recorded.tools.items():
            module = terms.get("module")
            if not isinstance(module, str) or not module or module.startswith(MCP_PREFIX):
                continue  # offered by the workflow itself, or by an MCP server
            entry = installed.get(name)
            used = len(calls.get(name, ()))
            if entry is None and self._covered(module):
                how = f"called {used} time(s)" if used else "never called"
                found.append(
                    Drift(
                        "tool_removed",
                        _short(name, _NAME_CHARS),
                        f"offered by module {_short(module, _NAME_CHARS)} ({how}); "
                        "no tool of that name is installed",
                    )
                )
            elif entry is None:
                missing.setdefault(module, []).append(name)
            else:
                found += _changes(entry, terms, overridden, asked)
                found += _rejected(entry, calls.get(name, []))
                if full is not None and isinstance(full.get(name), dict):
                    found += _described(entry, full[name])
        for module, names in missing.items():
            shown = ", ".join(_short(n, _NAME_CHARS) for n in names[:5])
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            found.append(
                Drift(
                    "module_missing",
                    None,
                    f"module {_short(module, _NAME_CHARS)} (tools {shown}{more}) is not loaded "
                    "here: give it to --tools",
                )
            )
        return found

    async def _full_specs(self, digest: str | None) -> dict[str, dict[str, Any]] | None:
        """The session's whole tool specs by name, from the store; None if unavailable."""
        if self.store is None or digest is None:
            return None
        if digest not in self._specs:
            try:
                document = await asyncio.to_thread(self.store.get_document, digest)
            except Exception:  # noqa: BLE001 - missing, corrupted or unreadable: not compared
                document = None
            self._specs[digest] = (
                {
                    s["name"]: s
                    for s in document
                    if isinstance(s, dict) and isinstance(s.get("name"), str)
                }
                if isinstance(document, list)
                else None
            )
        return self._specs[digest]

    def _agent_drift(self, config: dict[str, Any], agent: SessionConfig) -> list[Drift]:
        found: list[Drift] = []
        theirs = config.get("system")
        if theirs != agent.system:
            found.append(
                Drift(
                    "system_changed",
                    None,
                    f"the session keeps its system prompt ({_fingerprint(theirs)}); "
                    f"{self.agent_name} has {_fingerprint(agent.system)}",
                )
            )
        mine = agent.model_dump(mode="json")
        try:
            session = SessionConfig.model_validate(config).model_dump(mode="json")
        except (ValidationError, RecursionError):
            session = config
        differing = [
            key
            for key in sorted(agent.model_fields_set - _NOT_COMPARED)
            if _canonical(session.get(key)) != _canonical(mine.get(key))
        ]
        if differing:
            found.append(
                Drift(
                    "agent_changed",
                    None,
                    f"settings differ from {self.agent_name}: {', '.join(differing)}",
                    "info",
                )
            )
        return found


def _changes(
    entry: RegisteredTool, terms: dict[str, Any], overridden: dict[str, Any], asked: set[str]
) -> list[Drift]:
    """The installed tool's effect class and approval against the recorded terms."""
    found: list[Drift] = []
    spec = entry.spec
    effect = terms.get("effect", "write")
    if spec.name not in overridden and effect != spec.effect:
        found.append(
            Drift(
                "effect_changed",
                spec.name,
                f"recorded {_short(str(effect), _NAME_CHARS)}, installed {spec.effect}: "
                "the session's next calls run as the installed class",
            )
        )
    approval = terms.get("requires_approval", False)
    if spec.name not in asked and approval != spec.requires_approval:
        found.append(
            Drift(
                "approval_changed",
                spec.name,
                f"requires_approval recorded {_short(json.dumps(approval), _NAME_CHARS)}, "
                f"installed {json.dumps(spec.requires_approval)}: the open session keeps "
                "the recorded rule",
            )
        )
    return found


def _rejected(entry: RegisteredTool, inputs: list[Any]) -> list[Drift]:
    """The recorded inputs the installed tool's input model rejects, as the worker would."""
    first: str | None = None
    count = 0
    for given in inputs:
        try:
            entry.input_model.model_validate(given)
        except ValidationError as err:
            count += 1
            if first is None:
                problem = err.errors(include_url=False, include_input=False)[0]
                where = "/".join(str(p) for p in problem["loc"]) or "(root)"
                first = f"{where}: {problem['msg']}"
        except (RecursionError, ValueError, TypeError) as err:
            count += 1
            first = first or f"(root): {type(err).__name__}"
    if not count:
        return []
    return [
        Drift(
            "input_rejected",
            entry.name,
            f"{count} of {len(inputs)} recorded input(s) rejected by the installed schema, "
            f"e.g. {_short(first or '', _DETAIL_CHARS)}",
        )
    ]


def _described(entry: RegisteredTool, recorded: dict[str, Any]) -> list[Drift]:
    """The description and input schema the session's model sees, against the installed."""
    found: list[Drift] = []
    spec = entry.spec
    if recorded.get("description") != spec.description:
        found.append(
            Drift(
                "description_changed",
                spec.name,
                "the session's model still sees the recorded description",
                "info",
            )
        )
    schema = recorded.get("inputSchema")
    if _canonical(schema) != _canonical(spec.inputSchema):
        found.append(
            Drift("schema_changed", spec.name, _schema_change(schema, spec.inputSchema), "info")
        )
    return found


def _schema_change(old: Any, new: dict[str, Any]) -> str:
    """Which properties and required ones the installed schema adds or drops."""
    before, after = _dict(_dict(old).get("properties")), _dict(new.get("properties"))
    needed_before = {r for r in _list(_dict(old).get("required")) if isinstance(r, str)}
    needed_after = {r for r in _list(new.get("required")) if isinstance(r, str)}
    parts = [
        f"{label} {', '.join(sorted(names))}"
        for label, names in (
            ("added", set(after) - set(before)),
            ("removed", set(before) - set(after)),
            ("now required", needed_after - needed_before),
            ("no longer required", needed_before - needed_after),
            (
                "changed",
                {
                    k
                    for k in set(before) & set(after)
                    if _canonical(before[k]) != _canonical(after[k])
                },
            ),
        )
        if names
    ]
    what = "; ".join(parts) or "changed"
    return _short(f"input schema {what}; the session's model still sees the recorded one", 300)


def _fingerprint(text: Any) -> str:
    if not isinstance(text, str):
        return "no system prompt"
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{len(text)} characters, sha256 {digest}"


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):
        return f"<unreadable {id(value)}>"  # never equal to another


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
