"""What a worker is told about one MCP server, and the errors that stop a worker at start.

A server is named on the command line as ``NAME=COMMAND`` (a stdio server: the command is split
like a shell would, ``shlex.split``) or ``NAME=URL`` (streamable HTTP, ``http://`` or
``https://``). HTTP headers (for auth) come from the environment, never from the command line:
``KEEL_MCP_<NAME>_HEADERS`` holds a JSON object of header names to values, NAME upper-cased with
every character other than a letter or digit replaced by ``_``.

A stdio server's process gets the MCP SDK's default environment (``HOME``, ``PATH``, ``USER``
and a few more), not the worker's (which may hold cloud credentials and Keel's keys), plus
``KEEL_MCP_<NAME>_ENV``: a JSON object of variables to set for it.

What running each tool again does (its effect class, ``read``, ``idempotent`` or ``write``)
comes from the server's tool annotations; ``McpServerConfig.effects`` overrides it per tool,
and so does ``KEEL_MCP_<NAME>_EFFECTS`` for ``--mcp``: a JSON object of tool names to classes.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from keel.workflows.contracts import Effect
from keel.workflows.effect_tables import EffectTableError, effect_table

__all__ = [
    "McpConfigError",
    "McpServerConfig",
    "McpServerError",
    "McpToolConflict",
    "McpTransportError",
    "effects_variable",
    "env_variable",
    "headers_variable",
    "parse_mcp_spec",
]

_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_START_TIMEOUT_S = 30.0


class McpConfigError(ValueError):
    """An ``--mcp`` value or its headers variable cannot be understood."""


class McpServerError(RuntimeError):
    """An MCP server stops the worker at start: it did not start, or did not answer.

    Attributes:
        server: the server's name, as configured.
    """

    def __init__(self, server: str, message: str) -> None:
        """Name the server and say what went wrong."""
        super().__init__(message)
        self.server = server


class McpToolConflict(McpServerError):
    """Two sources (two MCP servers, or an MCP server and a ``@tool``) define one tool name.

    Attributes:
        tool: the tool name both define.
        sources: the two sources, e.g. ``("mcp:git", "mcp:other")`` or
            ``("mcp:git", "my.tools")``.
    """

    def __init__(self, server: str, tool: str, sources: tuple[str, str]) -> None:
        """Name the tool and both of its sources."""
        super().__init__(
            server,
            f"tool {tool!r} is defined twice: by {sources[0]} and by {sources[1]}; "
            "a worker's tool names must be unique (drop one server or module, or rename)",
        )
        self.tool = tool
        self.sources = sources


class McpTransportError(Exception):
    """A call could not reach its MCP server: the process died or the connection broke.

    The tool activity lets it fail the attempt, so Temporal retries the call; the retry opens
    a new connection. (A tool that answers ``isError`` is a result, not this.)
    """


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server a worker connects to.

    Exactly one of ``command`` (stdio) and ``url`` (streamable HTTP) is set.

    Attributes:
        name: the server's name; its tools' module is ``mcp:<name>``.
        command: the program and its arguments, for a stdio server.
        url: the endpoint, for a streamable HTTP server.
        headers: HTTP headers sent with every request (HTTP only).
        env: extra environment variables for a stdio server's process.
        cwd: working directory of a stdio server's process; default the worker's.
        timeout_s: how long one call of one of its tools may run.
        start_timeout_s: how long starting and listing the server may take.
        tools: offer only these of the server's tools (None: every one it lists); a name
            the server does not list stops the worker at start.
        effects: tool name -> effect class (``read``, ``idempotent``, ``write``), over what
            the server's annotations say (``readOnlyHint`` -> ``read``, else
            ``idempotentHint`` -> ``idempotent``, else ``write``); a name the server does not
            offer stops the worker at start.
    """

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    tools: tuple[str, ...] | None = None
    effects: Mapping[str, Effect] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check the name and that exactly one transport is given."""
        if not _SERVER_NAME_RE.match(self.name):
            raise McpConfigError(
                f"MCP server name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if bool(self.command) == bool(self.url):
            raise McpConfigError(
                f"MCP server {self.name!r}: give exactly one of a command (stdio) or a URL"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise McpConfigError(f"MCP server {self.name!r}: URL {self.url!r} is not http(s)")
        if self.headers and self.url is None:
            raise McpConfigError(f"MCP server {self.name!r}: headers are for HTTP servers only")
        if not self.timeout_s > 0 or not self.start_timeout_s > 0:
            raise McpConfigError(f"MCP server {self.name!r}: timeouts must be positive")
        try:
            effect_table(self.effects)
        except EffectTableError as err:
            raise McpConfigError(f"MCP server {self.name!r}: effects: {err}") from err

    @property
    def module(self) -> str:
        """The module name of this server's tools: ``mcp:<name>``."""
        return f"mcp:{self.name}"

    def describe(self) -> str:
        """The server as a person would name it in an error (headers left out)."""
        target = self.url if self.url is not None else shlex.join(self.command)
        return f"MCP server {self.name!r} ({target})"


def headers_variable(name: str) -> str:
    """The environment variable holding a server's HTTP headers: ``KEEL_MCP_<NAME>_HEADERS``.

    Args:
        name: the server's name.
    """
    return f"KEEL_MCP_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}_HEADERS"


def env_variable(name: str) -> str:
    """The environment variable holding a stdio server's extra variables: ``KEEL_MCP_<NAME>_ENV``.

    Args:
        name: the server's name.
    """
    return f"KEEL_MCP_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}_ENV"


def effects_variable(name: str) -> str:
    """The environment variable holding a server's effect classes: ``KEEL_MCP_<NAME>_EFFECTS``.

    Args:
        name: the server's name.
    """
    return f"KEEL_MCP_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}_EFFECTS"


def parse_mcp_spec(spec: str, environ: Mapping[str, str] | None = None) -> McpServerConfig:
    """Parse one ``--mcp`` value: ``NAME=COMMAND`` (stdio) or ``NAME=URL`` (streamable HTTP).

    Args:
        spec: e.g. ``git=mcp-server-git --repository .`` or ``docs=https://host/mcp``.
        environ: where to read ``KEEL_MCP_<NAME>_HEADERS`` (a JSON object) for an HTTP
            server, ``KEEL_MCP_<NAME>_ENV`` (a JSON object) for a stdio one, and
            ``KEEL_MCP_<NAME>_EFFECTS`` (a JSON object of tool names to effect classes) for
            either: the environment the settings were read from (``Settings.environ``); none
            when not given.

    Returns:
        The server's configuration.

    Raises:
        McpConfigError: no ``=``, a bad name, an empty or unbalanced command, a headers,
            env or effects variable that is not a JSON object of strings, or an effect that
            is not ``read``, ``idempotent`` or ``write`` (naming the server and the tool).
    """
    name, sep, target = spec.partition("=")
    name, target = name.strip(), target.strip()
    if not sep or not name or not target:
        raise McpConfigError(
            f"--mcp {spec!r}: expected NAME=COMMAND (stdio) or NAME=URL (streamable HTTP), "
            "e.g. git='mcp-server-git --repository .'"
        )
    if not _SERVER_NAME_RE.match(name):
        raise McpConfigError(
            f"--mcp {spec!r}: server name {name!r} must be 1-64 letters, digits, '_' or '-'"
        )
    effects = _effects(name, environ)
    if target.startswith(("http://", "https://")):
        headers = _json_object(headers_variable(name), environ)
        return McpServerConfig(name=name, url=target, headers=headers, effects=effects)
    try:
        command = tuple(shlex.split(target))
    except ValueError as err:
        raise McpConfigError(f"--mcp {spec!r}: cannot split the command: {err}") from err
    if not command:
        raise McpConfigError(f"--mcp {spec!r}: the command is empty")
    env = _json_object(env_variable(name), environ)
    return McpServerConfig(name=name, command=command, env=env, effects=effects)


def _effects(name: str, environ: Mapping[str, str] | None) -> dict[str, Effect]:
    variable = effects_variable(name)
    try:
        return effect_table(_json_object(variable, environ))
    except EffectTableError as err:
        raise McpConfigError(f"{variable}: MCP server {name!r}: {err}") from err


def _json_object(variable: str, environ: Mapping[str, str] | None) -> dict[str, str]:
    raw = (environ or {}).get(variable)
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise McpConfigError(f"{variable} is not JSON: {err}") from err
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpConfigError(f'{variable} must be a JSON object of strings, e.g. {{"A": "b"}}')
    return value
