"""What ``keel run`` reads from the command line: the session's settings, model and history.

Every problem found here is a ``UsageError``: exit 2, with the flag or file and what is wrong
with it, before anything is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from keel.activities.mcp import McpServerConfig, parse_mcp_spec
from keel.activities.models import (
    ModelError,
    ModelSpecError,
    check_model_spec,
    path_prefixes,
    preflight,
)
from keel.activities.structured import OutputSchemaError, check_output_schema
from keel.worker.client.agent_files import AgentFile, load_agent_file
from keel.worker.client.errors import AgentFileError
from keel.worker.client.paths import local_path, sendable_model_spec
from keel.workflows.boundary import InputRejected, normalise_history
from keel.workflows.budget_contracts import ModelPrice
from keel.workflows.contracts import Effect, SessionConfig
from keel.workflows.effect_tables import EffectTableError, effect_table
from keel.workflows.escalation_contracts import EscalationStep, escalation_problem
from keel.workflows.ledger import SessionInput
from keel.workflows.limits import MAX_START_BYTES
from keel.workflows.messages import Message, text_block
from keel.workflows.signing import BadSignature, public_key_bytes


class UsageError(Exception):
    """Invalid input on the command line; exit 2 with this message."""


# The most a JSON Schema file may take (``--output-schema``).
MAX_SCHEMA_BYTES = 1_000_000
_MESSAGES = TypeAdapter(list[Message])

# The ``keel run`` flag of each SessionConfig field, to name it when a value is invalid.
_FLAGS = {
    "model": "--model",
    "system": "--system",
    "tool_modules": "--tools",
    "approval_tools": "--require-approval",
    "approvers": "--approvers",
    "approval_timeout_s": "--approval-timeout",
    "max_cycles_per_turn": "--max-cycles",
    "max_turn_tokens": "--turn-token-budget",
    "max_session_tokens": "--token-budget",
    "max_turn_cost_usd": "--turn-cost-budget",
    "max_session_cost_usd": "--cost-budget",
    "on_budget": "--on-budget",
    "model_retry_s": "--model-retry",
    "heartbeat_timeout_s": "--heartbeat-timeout",
    "output_schema": "--output-schema",
    "notify": "--notify",
    "tool_effects": "--effect",
    "price": "--price",
    "price.input": "--price",
    "price.output": "--price",
    "escalate": "--escalate",
}


def tool_modules(value: str | None) -> list[str]:
    """Module names from a comma-separated flag value."""
    return [m.strip() for m in (value or "").split(",") if m.strip()]


def session_tool_modules(value: str) -> list[str]:
    """What a new session's ``tool_modules`` records for ``--tools``: module names.

    A file's path (``./mytools.py``) is recorded as the module it is imported as
    (``mytools``): the workers find it by that name, with its folder on their path (the
    worker ``keel run`` embeds puts it there; another worker needs ``--tools`` naming the
    file, or the folder on its ``PYTHONPATH``).

    Raises:
        UsageError: a file that is not there, or whose name is no module name.
    """
    from keel.activities.tools import ToolModuleError, tool_module_name

    try:
        return [tool_module_name(entry) for entry in tool_modules(value)]
    except ToolModuleError as err:
        raise UsageError(f"--tools: {err}") from None


def validation_summary(err: ValidationError, names: dict[str, str] | None = None) -> str:
    """A pydantic error as one line: ``where: what`` for each problem, joined by ``;``.

    Args:
        err: the error.
        names: how to name a field (a flag, say) instead of its path.
    """
    problems = []
    for error in err.errors():
        where = ".".join(str(part) for part in error["loc"])
        where = (names or {}).get(where, where)
        problems.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    return "; ".join(problems)


def read_text_file(flag: str, path: str, limit: int) -> str:
    """A file named on the command line, as text: at most ``limit`` bytes of UTF-8.

    At most ``limit + 1`` bytes are read, so a huge file (or ``/dev/zero``) costs nothing.

    Raises:
        UsageError: naming the flag and the file: unreadable, over the limit, or not UTF-8.
    """
    where = local_path(path)
    try:
        with where.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot read {where}: {err.strerror or err}") from err
    if len(data) > limit:
        raise UsageError(f"{flag} {path}: the file is over the limit of {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"{flag} {path}: not UTF-8 text (byte {data[err.start : err.start + 1]!r} at "
            f"offset {err.start})"
        ) from None


def _json_file(flag: str, path: str, limit: int) -> Any:
    """The JSON value of a file named on the command line (see ``read_text_file``).

    Raises:
        UsageError: the file's problem, or JSON that is not valid, or that holds text no
            UTF-8 can carry (an escaped lone surrogate).
    """
    try:
        value = json.loads(read_text_file(flag, path, limit))
    except json.JSONDecodeError as err:
        raise UsageError(f"{flag} {path}: not valid JSON: {err}") from err
    except RecursionError:
        raise UsageError(f"{flag} {path}: nested too deeply to read") from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        raise UsageError(
            f"{flag} {path}: holds text that is not valid Unicode ({err.object[err.start]!a})"
        ) from None
    return value


def read_messages(path: str) -> list[Message]:
    """Read a conversation to import: a JSON list of messages or ``{"messages": [...]}``.

    Raises:
        UsageError: naming the file and what is wrong with it; a conversation over
            ``MAX_START_BYTES`` encoded.
    """
    raw = _json_file("--messages", path, MAX_START_BYTES)
    if isinstance(raw, dict) and "messages" in raw:
        raw = raw["messages"]
    try:
        messages = TypeAdapter(list[Message]).validate_python(raw)
        normalise_history(messages)
    except ValidationError as err:
        raise UsageError(
            f"--messages {path}: not a list of Converse messages: {validation_summary(err)}"
        ) from err
    except InputRejected as err:
        raise UsageError(f"--messages {path}: {err}") from err
    size = len(_MESSAGES.dump_json(messages))
    if size > MAX_START_BYTES:
        raise UsageError(
            f"--messages {path}: the conversation is {size:,} bytes encoded, over the limit "
            f"of {MAX_START_BYTES:,} bytes (Temporal takes at most 2 MB in one payload)"
        )
    return messages


def check_start_size(
    config: SessionConfig, messages: Sequence[Message], prompt: str, messages_file: str | None
) -> None:
    """Refuse a session start that Temporal would refuse for its size, before sending it.

    The start input carries the settings, the imported conversation and (``--detach``) the
    prompt, in one payload, which Temporal takes up to 2 MB: at most ``MAX_START_BYTES``.

    Raises:
        UsageError: naming what is large and the limit.
    """
    start = SessionInput(config=config, messages=list(messages), prompt=[text_block(prompt)])
    size = len(start.model_dump_json())
    if size > MAX_START_BYTES:
        parts = ["the settings", "the prompt"] + ([f"--messages {messages_file}"] * bool(messages))
        raise UsageError(
            f"{', '.join(parts)} come to {size:,} bytes encoded, over the limit of "
            f"{MAX_START_BYTES:,} bytes for what starts a session (Temporal takes at most 2 MB "
            "in one payload)"
        )


def new_session_config(
    args: argparse.Namespace, model: str | None, agent: AgentFile | None = None
) -> SessionConfig:
    """The configuration of a new session, from ``keel run``'s flags over its agent file.

    Raises:
        UsageError: no model, or a flag's value is invalid (named by its flag).
    """
    if not model:
        raise UsageError("no model: pass --model SPEC or set KEEL_MODEL")
    settings: dict[str, Any] = agent.config.model_dump() if agent is not None else {}
    flags: dict[str, Any] = {
        "model": model,
        "system": args.system,
        "tool_modules": session_tool_modules(args.tools) if args.tools is not None else None,
        "approval_tools": (
            tool_modules(args.require_approval) if args.require_approval is not None else None
        ),
        "approvers": tool_modules(args.approvers) if args.approvers is not None else None,
        "approval_timeout_s": args.approval_timeout,
        "max_cycles_per_turn": args.max_cycles,
        "max_turn_tokens": args.turn_token_budget,
        "max_session_tokens": args.token_budget,
        "max_turn_cost_usd": args.turn_cost_budget,
        "max_session_cost_usd": args.cost_budget,
        "on_budget": args.on_budget,
        "model_retry_s": args.model_retry,
        "heartbeat_timeout_s": args.heartbeat_timeout,
        "output_schema": read_output_schema(args.output_schema),
        "approver_keys": approver_keys(args.approver_key) if args.approver_key else None,
        "notify": args.notify,
        "price": model_price(args.price),
        "tool_effects": (
            {**settings.get("tool_effects", {}), **tool_effects(args.effect)}
            if args.effect
            else None
        ),
    }
    settings.update({k: v for k, v in flags.items() if v is not None})
    steps = escalation_steps(getattr(args, "escalate", None) or [])
    if steps:
        settings["escalate"] = steps
    _check_escalation(settings, "--escalate" if steps else "the agent file's escalate")
    try:
        return SessionConfig(**settings)
    except ValidationError as err:
        raise UsageError(f"invalid session settings: {validation_summary(err, _FLAGS)}") from err


def model_price(value: str | None) -> ModelPrice | None:
    """``--price IN:OUT``: dollars per million input and output tokens; None without it.

    Raises:
        UsageError: not two numbers of 0 or more, separated by ``:``.
    """
    if value is None:
        return None
    given, sep, taken = value.partition(":")
    try:
        if not sep:
            raise ValueError
        price = ModelPrice(input=float(given), output=float(taken))
    except (ValueError, ValidationError):
        raise UsageError(
            f"--price {value!r}: expected IN:OUT, US dollars per million input and output "
            "tokens, each a number 0 or more (e.g. 3:15)"
        ) from None
    return price


def agent_modules(agent: AgentFile | None) -> list[str]:
    """The tool modules an agent file's sessions use, for the worker ``keel run`` embeds."""
    if agent is None:
        return []
    found = list(agent.config.tool_modules)
    pending = list(agent.agents.values())
    while pending:
        sub = pending.pop()
        found += [m for m in sub.config.tool_modules if m not in found]
        pending += sub.agents.values()
    return found


def read_agent(path: str | None, model: str | None) -> AgentFile | None:
    """The agent file of ``--agent FILE``; None without the flag.

    Args:
        path: the file as typed.
        model: the model where the file names none (``--model``, else ``KEEL_MODEL``).

    Raises:
        UsageError: the file's problem, with its line and key.
    """
    if path is None:
        return None
    try:
        return load_agent_file(path, model=model)
    except AgentFileError as err:
        raise UsageError(f"--agent {path}: {err}") from err


def read_output_schema(path: str | None) -> dict[str, Any] | None:
    """The JSON Schema of ``--output-schema FILE``, checked; None without the flag.

    Raises:
        UsageError: the file cannot be read, is not JSON, or is not a JSON Schema.
    """
    if path is None:
        return None
    schema = _json_file("--output-schema", path, MAX_SCHEMA_BYTES)
    try:
        check_output_schema(schema)
    except OutputSchemaError as err:
        raise UsageError(f"--output-schema {path}: {err}") from err
    assert isinstance(schema, dict)  # check_output_schema refuses anything else
    return schema


def approver_keys(values: Sequence[str]) -> dict[str, str]:
    """``--approver-key NAME=PUBLIC_KEY`` flags, checked.

    Raises:
        UsageError: not ``NAME=ed25519:<base64 of 32 bytes>``, or a name given twice.
    """
    keys: dict[str, str] = {}
    for value in values:
        name, sep, key = value.partition("=")
        name, key = name.strip(), key.strip()
        if not sep or not name or not key:
            raise UsageError(f"--approver-key {value!r}: expected NAME=PUBLIC_KEY")
        if name in keys:
            raise UsageError(f"--approver-key: {name!r} is given twice")
        try:
            public_key_bytes(key)
        except BadSignature as err:
            raise UsageError(f"--approver-key {name}: {err}") from None
        keys[name] = key
    return keys


def escalation_steps(values: Sequence[str]) -> list[EscalationStep]:
    """``--escalate SECONDS:ID[,ID]`` flags: the session's escalation steps, checked.

    Raises:
        UsageError: not ``SECONDS:ID[,ID]``, SECONDS not a positive number, or no approver.
    """
    steps = []
    for value in values:
        when, sep, names = value.partition(":")
        approvers = tool_modules(names)
        try:
            after_s = float(when)
        except ValueError:
            after_s = -1.0
        if not sep or not approvers:
            raise UsageError(f"--escalate {value!r}: expected SECONDS:ID[,ID], e.g. 3600:lead")
        if not after_s > 0 or after_s == float("inf"):
            raise UsageError(f"--escalate {value!r}: SECONDS must be a number above 0")
        steps.append(EscalationStep(after_s=after_s, approvers=approvers))
    return steps


def _check_escalation(settings: Mapping[str, Any], named: str) -> None:
    """Refuse escalation steps that could never work, naming where they came from.

    Raises:
        UsageError: steps out of order, at or after the approval timeout, an approver
            named twice or already an approver, or without a key on a signed session.
    """
    steps = [EscalationStep.model_validate(step) for step in settings.get("escalate") or []]
    problem = escalation_problem(
        steps,
        settings.get("approvers") or [],
        settings.get("approver_keys") or {},
        settings.get("approval_timeout_s"),
    )
    if problem is not None:
        raise UsageError(f"{named}: {problem}")


def tool_effects(values: Sequence[str]) -> dict[str, Effect]:
    """``--effect TOOL=CLASS`` flags: what running each tool again does, checked.

    Raises:
        UsageError: not ``TOOL=CLASS``, a tool given twice, or a class that is not ``read``,
            ``idempotent`` or ``write`` (naming the tool, the value and the classes).
    """
    table: dict[str, str] = {}
    for value in values:
        name, sep, effect = value.partition("=")
        name, effect = name.strip(), effect.strip()
        if not sep or not name or not effect:
            raise UsageError(f"--effect {value!r}: expected TOOL=CLASS, e.g. lookup=read")
        if name in table:
            raise UsageError(f"--effect: tool {name!r} is given twice")
        table[name] = effect
    try:
        return effect_table(table)
    except EffectTableError as err:
        raise UsageError(f"--effect: {err}") from None


def mcp_servers(values: Sequence[str], environ: Mapping[str, str]) -> list[McpServerConfig]:
    """The MCP servers of ``--mcp NAME=COMMAND|URL`` flags.

    Args:
        values: the flags' values.
        environ: where ``KEEL_MCP_<NAME>_ENV`` / ``_HEADERS`` are read (``Settings.environ``).

    Raises:
        McpConfigError: a value that names no server, or a bad command or URL.
    """
    return [parse_mcp_spec(value, environ) for value in values]


def check_model(spec: str, *, local: bool, named: str = "--model") -> None:
    """Refuse a model spec that cannot work, before a session is created.

    The provider must exist and take the spec's options (no I/O). When this process runs the
    worker (embedded mode), also run the provider's preflight: what the worker would find
    missing (the scripted file, AWS credentials for Bedrock).

    Args:
        spec: the model spec.
        local: whether this process runs the worker.
        named: where the spec came from, to prefix a spec's error (``--model``,
            ``KEEL_MODEL``).

    Raises:
        UsageError: naming the problem and how to fix it.
    """
    try:
        if local:
            preflight(spec)
        else:
            check_model_spec(spec)
    except ModelSpecError as err:
        raise UsageError(f"{named}: {err}") from err
    except ModelError as err:
        raise UsageError(str(err)) from err


def check_model_given(flag: str | None, environ_model: str | None) -> None:
    """Check ``--model`` (else ``KEEL_MODEL``) before anything reads a file or starts.

    Raises:
        UsageError: naming ``--model`` or ``KEEL_MODEL`` and what is wrong with it.
    """
    if flag:
        check_model(flag, local=False)
    elif environ_model:
        check_model(environ_model, local=False, named="KEEL_MODEL")


def sendable_model(spec: str) -> str:
    """The model spec to send: its file resolved here, or as typed with a note on stderr."""
    sendable = sendable_model_spec(spec)
    provider, _, path = spec.partition(":")
    typed_relative = not Path(path).expanduser().is_absolute()
    if provider in path_prefixes() and sendable == spec and typed_relative:
        print(
            f"keel: note: {provider} model file {path!r} is not in {Path.cwd()}; sent as "
            "typed, for the worker to read relative to its own working directory",
            file=sys.stderr,
        )
    return sendable
