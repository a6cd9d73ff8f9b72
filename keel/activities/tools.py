"""The ``@tool`` decorator and the worker's tool registry.

A tool is a plain function (sync or async) decorated with ``@tool`` or
``@tool(requires_approval=True, timeout_s=60)``. Its input schema comes from its type hints and
its Google-style docstring (summary and body become the description, ``Args:`` entries the
parameter descriptions), through a pydantic model built from the signature; the same model
validates the model's input before the tool runs (see ``keel.activities.tool_run``).

A worker imports the modules named with ``--tools`` (:func:`load_tool_modules`); importing a
module registers its tools here. Each is a module name, found as ``python -m`` finds one (the
working directory is on the path for tool imports), or a file's path (``./mytools.py``),
imported under its module name (:func:`tool_module_name`) with its folder on the path.

``@tool(runs_on="client")`` declares a client-side tool: its contract is the same (input from
the type hints; output from the return annotation, which a result must match), but no worker
runs its body. A client attached to the session runs it (``keel attach``, ``KeelClient
.serve_tools``, both in ``keel.worker.client.client_tools``), from the same module.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from keel.activities.function_judges import judges_of
from keel.workflows.contracts import Effect, RunsOn, ToolSpec
from keel.workflows.tool_policies import policies_of

__all__ = [
    "MCP_MODULE_PREFIX",
    "RegisteredTool",
    "ToolContext",
    "ToolInterrupted",
    "ToolModuleError",
    "get_tool",
    "load_tool_modules",
    "registered_tools",
    "specs_for_modules",
    "tool",
    "tool_module_name",
]

F = TypeVar("F", bound=Callable[..., Any])

# A session's tool_modules entry naming an MCP server's tools: ``mcp:<server name>``.
MCP_MODULE_PREFIX = "mcp:"
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns?|Yields?|Raises|Examples?|Notes?|Attributes|Todo|See Also|Warnings?|"
    r"References|Methods)\s*:\s*$"
)
_ARGS_SECTIONS = {"Args", "Arguments", "Parameters", "Params"}
_ARG_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolModuleError(ValueError):
    """A tool module could not be loaded, or a session asked for one this worker lacks."""


class ToolInterrupted(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Raised by ``ctx.interrupt`` to stop a tool until a human answers.

    A ``BaseException`` so that a tool's own ``except Exception`` does not swallow it.
    """

    def __init__(self, name: str, reason: str | None) -> None:
        """Name the question and say why it is asked."""
        super().__init__(name)
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class ToolContext:
    """What a ``@tool(context=True)`` function receives as its first argument, ``ctx``.

    Attributes:
        session_id: the session (workflow) that asked for the tool run.
        tool_use_id: the model's ``toolUseId`` for this call.
        idempotency_key: ``<workflow id>/<toolUseId>``; the same on every retry and every
            re-run of this call, for side effects that must happen once.
        answers: the answers humans gave to this call's questions so far, by name.
        attempt: which run of the tool's body this is for this call, from 1: above 1 after
            an attempt that crashed (its worker died, its time ran out), an answered question,
            or a person's approval to run it again (``effect="write"``).
    """

    session_id: str
    tool_use_id: str
    idempotency_key: str
    answers: Mapping[str, Any] = field(default_factory=dict)
    attempt: int = 1

    def interrupt(self, name: str, reason: str | None = None) -> Any:
        """Ask a human and stop until they answer; returns the answer once there is one.

        The first time, this stops the tool: the session parks the turn behind a
        ``question`` interrupt and waits for ``keel respond``. The tool then runs again from
        the start, with the same input and idempotency key, and this call returns the answer
        (any JSON value). Side effects before the question therefore happen again on the
        re-run unless guarded by ``idempotency_key``.

        Args:
            name: names the question within this tool call (ask each name once).
            reason: what is asked, shown to the person answering.

        Raises:
            ToolInterrupted: no answer yet; let it propagate.
        """
        if name in self.answers:
            return self.answers[name]
        raise ToolInterrupted(name, reason)


@dataclass(frozen=True)
class RegisteredTool:
    """A tool known to this worker.

    Attributes:
        fn: the decorated function, as written.
        name: the tool's name, as the model sees it.
        spec: what the workflow and the model are told about the tool.
        input_model: pydantic model of the tool's parameters (without ``ctx``).
        is_async: whether ``fn`` is a coroutine function.
        takes_context: whether ``fn`` takes a :class:`ToolContext` as first argument.
        output: for a client-side tool, its declared output type (the return annotation;
            ``Any`` without one), which a client's result must match.
        reconcile: for a ``write`` tool, tells after a crash whether its effect happened
            (``@tool(reconcile=...)``); called with the tool's arguments.
    """

    fn: Callable[..., Any]
    name: str
    spec: ToolSpec
    input_model: type[BaseModel]
    is_async: bool
    takes_context: bool
    output: TypeAdapter[Any] | None = None
    reconcile: Callable[..., Any] | None = None


_REGISTRY: dict[str, RegisteredTool] = {}
EFFECTS: tuple[Effect, ...] = ("read", "idempotent", "write")


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    *,
    requires_approval: bool | Literal["always"] = False,
    timeout_s: float = 300.0,
    name: str | None = None,
    context: bool = False,
    runs_on: RunsOn = "worker",
    effect: Effect = "write",
    reconcile: Callable[..., Any] | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    /,
    *,
    requires_approval: bool | Literal["always"] = False,
    timeout_s: float = 300.0,
    name: str | None = None,
    context: bool = False,
    runs_on: RunsOn = "worker",
    effect: Effect = "write",
    reconcile: Callable[..., Any] | None = None,
) -> F | Callable[[F], F]:
    """Register a function as a tool; use bare (``@tool``) or with options (``@tool(...)``).

    The function is returned unchanged and stays callable as before.

    Args:
        fn: the function, when used bare.
        requires_approval: whether a human must approve each call before it runs;
            ``"always"``: and no standing approval may stand in for one (see
            ``keel.workflows.standing``).
        timeout_s: how long one call may run, enforced by the tool activity.
        name: the tool's name; defaults to the function's ``__name__``.
        context: pass a :class:`ToolContext` as the first positional argument, ``ctx``.
        runs_on: ``"client"``: a client-side tool. No worker runs the body (it may be
            ``...``); each call waits for a client attached to the session to run it on its
            machine and return a result of the declared return type. ``timeout_s`` is then
            how long the session waits for that result.
        effect: what running it again does to the world, for when an attempt crashed
            (docs/tools.md, "Effects and crashes"): ``"read"`` nothing, ``"idempotent"``
            nothing more (it dedupes, on ``ctx.idempotency_key`` say); ``"write"`` (the
            default) may do it twice, so it is never run again blindly once an attempt may
            have had its effect: ``reconcile`` tells, or a person decides.
        reconcile: for a ``write`` tool, called (with the tool's arguments, and ``ctx`` when
            ``context``) instead of the tool after an attempt ended without a result: a value
            other than None is the tool's result (the effect happened); None, it did not, and
            the tool runs again; an exception asks a person. Sync or async.

    Returns:
        The function itself, or a decorator when called with options.

    Raises:
        ValueError: on an invalid name or timeout, a signature that cannot become a schema,
            or a name already registered by a different function.
    """

    def decorate(func: F) -> F:
        if runs_on not in ("worker", "client"):
            raise ValueError(
                f"tool {name or func.__name__!r}: runs_on is 'worker' or 'client', not {runs_on!r}"
            )
        _register(func, name or func.__name__, requires_approval, timeout_s, context)
        _effects(name or func.__name__, effect, reconcile)
        if runs_on == "client":
            _client_side(name or func.__name__)
        return func

    if fn is not None:
        return decorate(fn)
    return decorate


def registered_tools() -> dict[str, RegisteredTool]:
    """Every tool registered on this worker, by name (a copy)."""
    return dict(_REGISTRY)


def get_tool(name: str) -> RegisteredTool | None:
    """The tool registered under ``name``, if any.

    Args:
        name: the tool's name.
    """
    return _REGISTRY.get(name)


def load_tool_modules(names: Sequence[str]) -> list[str]:
    """Import tool modules, by name or by file, which registers their tools.

    A name is looked for as ``python -m`` looks: in the working directory (added to the end
    of ``sys.path`` if it is not there), then on the path. A file (``./mytools.py``; see
    :func:`tool_module_name`) is imported under its module name, its folder added to the
    end of ``sys.path``.

    Args:
        names: module names or files' paths (``--tools`` values); blanks and repeats are
            ignored, and so are ``mcp:NAME`` entries (an MCP server's tools, not a module to
            import).

    Returns:
        The module names imported, in order, without blanks or repeats: what a session's
        ``tool_modules`` names.

    Raises:
        ToolModuleError: a file that is not there, a module that is not found (naming the
            folders searched) or could not be imported, or that defines no tools.
    """
    loaded: list[str] = []
    for raw in names:
        entry = raw.strip()
        if not entry or entry.startswith(MCP_MODULE_PREFIX):
            continue
        module = tool_module_name(entry)
        if module in loaded:
            continue
        folder = _import_folder(entry)
        _on_path(folder)
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module + ".").startswith(exc.name + "."):
                raise _import_failed(entry, exc) from exc  # the module itself lacks something
            raise ToolModuleError(
                f"tool module {module!r} not found: no {_looked_for(module)} in {folder} or on "
                "the Python path (name a file to load it from elsewhere: --tools "
                "./path/to/mytools.py)"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - any import failure is reported the same way
            raise _import_failed(entry, exc) from exc
        _check_not_shadowed(entry, module, folder)
        if not _tools_of(module) and not policies_of(module) and not judges_of(module):
            raise ToolModuleError(
                f"tool module {module!r} defines no @tool functions, no @tool_policy and no @judge"
            )
        loaded.append(module)
    return loaded


def tool_module_name(entry: str) -> str:
    """The module name a ``--tools`` entry is imported as, and a session's ``tool_modules`` names.

    An entry that ends in ``.py`` or holds a ``/`` is a file's path: ``./mytools.py`` is the
    module ``mytools``, imported from its folder. A file inside a package (folders with an
    ``__init__.py``) is named from the topmost one (``pkg/tools.py``: ``pkg.tools``); a
    package's folder is the package. Anything else is a module name, as given.

    Args:
        entry: a module name or a file's path (relative to the working directory).

    Raises:
        ToolModuleError: a file or package folder that is not there, or whose name is no
            module name.
    """
    entry = entry.strip()
    if not _is_file_entry(entry):
        return entry
    path = Path(entry).expanduser()
    where = path.resolve()
    if where.is_dir() and (where / "__init__.py").is_file():
        parts, folder = [where.name], where.parent
    elif where.is_file() and where.suffix == ".py":
        parts, folder = ([] if where.stem == "__init__" else [where.stem]), where.parent
    else:
        raise ToolModuleError(
            f"tool file {entry!r} not found (no Python file or package folder {where})"
        )
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or not all(part.isidentifier() for part in parts):
        raise ToolModuleError(
            f"tool file {entry!r}: {'.'.join(parts) or where.name!r} is not a module name "
            "Python can import (letters, digits and _, not starting with a digit)"
        )
    return ".".join(parts)


def _is_file_entry(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or "\\" in entry


def _import_folder(entry: str) -> Path:
    """The folder a ``--tools`` entry is imported from: the working directory for a name."""
    if not _is_file_entry(entry):
        return Path.cwd().resolve()
    where = Path(entry).expanduser().resolve()
    folder = where if where.is_dir() else where.parent
    if where.name == "__init__.py":
        folder = folder.parent
    while (folder / "__init__.py").is_file():
        folder = folder.parent
    return folder


def _on_path(folder: Path) -> None:
    """Put ``folder`` at the end of ``sys.path`` unless it is on it (``""`` is the cwd)."""
    here = str(folder)
    on_path = {str(Path(p or ".").resolve()) for p in sys.path}
    if here not in on_path:
        sys.path.append(here)
        importlib.invalidate_caches()


def _looked_for(module: str) -> str:
    path = module.replace(".", "/")
    return f"{path}.py or {path}/__init__.py"


def _import_failed(entry: str, exc: BaseException) -> ToolModuleError:
    return ToolModuleError(
        f"tool module {entry!r} could not be imported: {type(exc).__name__}: {exc}"
    )


def _check_not_shadowed(entry: str, module: str, folder: Path) -> None:
    """Refuse a tool module that came from elsewhere than the file the user has in ``folder``.

    ``folder`` is at the end of the path, so an installed module (or one imported already)
    of the same name wins over the user's file; say so rather than use the wrong one.
    """
    top = module.split(".")[0]
    mine = [folder / f"{top}.py", folder / top / "__init__.py"]
    if not any(candidate.is_file() for candidate in mine):
        return
    imported = getattr(sys.modules.get(top), "__file__", None)
    if imported is not None and Path(imported).resolve().parent in (folder, folder / top):
        return
    raise ToolModuleError(
        f"tool module {entry!r}: the name {top!r} is taken by {imported or 'a built-in module'}, "
        f"so {folder} is not where it was imported from; rename your module"
    )


def specs_for_modules(modules: Sequence[str], extra: Sequence[ToolSpec] = ()) -> list[ToolSpec]:
    """Specs of the tools defined in ``modules`` (or in a submodule of one of them).

    Args:
        modules: module names a session may use, or ``mcp:NAME`` for the tools of an MCP
            server; empty means every tool: every registered one, then every one of ``extra``.
        extra: tools from elsewhere than ``@tool`` (the worker's MCP servers), whose ``module``
            is ``mcp:NAME``.

    Returns:
        The tools' specs, in registration order, each once.

    Raises:
        ToolModuleError: a requested module has no tools loaded on this worker, or a
            requested MCP server is not configured on it.
    """
    if not modules:
        return [*(t.spec for t in _REGISTRY.values()), *extra]
    chosen: dict[str, ToolSpec] = {}
    for module in modules:
        if module.startswith(MCP_MODULE_PREFIX):
            served = [spec for spec in extra if spec.module == module]
            if not served:
                name = module[len(MCP_MODULE_PREFIX) :]
                raise ToolModuleError(
                    f"MCP server {name!r} is not configured on this worker, or offers no tools "
                    f"(start it with --mcp {name}=COMMAND_OR_URL)"
                )
            for spec in served:
                chosen.setdefault(spec.name, spec)
            continue
        found = _tools_of(module)
        if not found:
            raise ToolModuleError(
                f"tool module {module!r} is not loaded on this worker "
                f"(start it with --tools {module})"
            )
        for t in found:
            chosen.setdefault(t.name, t.spec)
    return list(chosen.values())


def _tools_of(module: str) -> list[RegisteredTool]:
    prefix = module + "."
    return [
        t for t in _REGISTRY.values() if t.spec.module == module or t.spec.module.startswith(prefix)
    ]


def _register(
    fn: Callable[..., Any],
    name: str,
    requires_approval: bool | Literal["always"],
    timeout_s: float,
    context: bool,
) -> None:
    if requires_approval not in (True, False, "always"):
        raise ValueError(
            f"tool {name!r}: requires_approval is True, False or 'always', not "
            f"{requires_approval!r}"
        )
    if not _NAME_RE.match(name):
        raise ValueError(f"tool name {name!r} must match {_NAME_RE.pattern}")
    if not timeout_s > 0:
        raise ValueError(f"tool {name!r}: timeout_s must be positive, got {timeout_s!r}")
    description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    input_model = _input_model(fn, name, arg_docs, context)
    try:
        schema = input_model.model_json_schema()
    except Exception as exc:  # noqa: BLE001 - pydantic raises several error types here
        raise ValueError(f"tool {name!r}: cannot build its input schema: {exc}") from exc
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    spec = ToolSpec(
        name=name,
        description=description or name,
        inputSchema=schema,
        requires_approval=requires_approval,
        timeout_s=float(timeout_s),
        module=fn.__module__,
    )
    entry = RegisteredTool(
        fn=fn,
        name=name,
        spec=spec,
        input_model=input_model,
        is_async=inspect.iscoroutinefunction(fn),
        takes_context=context,
    )
    existing = _REGISTRY.get(name)
    if existing is not None and _qualname(existing.fn) != _qualname(fn):
        raise ValueError(
            f"tool {name!r} is already registered by {_qualname(existing.fn)} "
            f"(module {existing.spec.module}); cannot register {_qualname(fn)} "
            f"(module {fn.__module__}) under the same name"
        )
    _REGISTRY[name] = entry


def _client_side(name: str) -> None:
    """Make a registered tool client-side: its spec says so, and it gets its output type."""
    entry = _REGISTRY[name]
    try:
        returns = typing.get_type_hints(entry.fn, include_extras=True).get("return", Any)
        output: TypeAdapter[Any] = TypeAdapter(returns)
        output.json_schema()
    except Exception as exc:  # noqa: BLE001 - pydantic raises several error types here
        del _REGISTRY[name]  # not half registered: no worker may think it runs it
        raise ValueError(f"tool {name!r}: cannot use its return annotation: {exc}") from exc
    spec = entry.spec.model_copy(update={"runs_on": "client"})
    _REGISTRY[name] = dataclasses.replace(entry, spec=spec, output=output)


def _effects(name: str, effect: Effect, reconcile: Callable[..., Any] | None) -> None:
    """Give a registered tool its effect class and its reconcile function."""
    entry = _REGISTRY[name]
    problem = None
    if effect not in EFFECTS:
        problem = f"effect is one of {', '.join(EFFECTS)}, not {effect!r}"
    elif reconcile is not None and not callable(reconcile):
        problem = f"reconcile must be a function, not {type(reconcile).__name__}"
    elif reconcile is not None and effect != "write":
        problem = f"reconcile is for a 'write' tool; an {effect!r} tool is run again as it is"
    if problem is not None:
        del _REGISTRY[name]  # not half registered
        raise ValueError(f"tool {name!r}: {problem}")
    spec = entry.spec.model_copy(update={"effect": effect})
    _REGISTRY[name] = dataclasses.replace(entry, spec=spec, reconcile=reconcile)


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _input_model(
    fn: Callable[..., Any], name: str, arg_docs: dict[str, str], context: bool
) -> type[BaseModel]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # noqa: BLE001 - unresolvable annotations of any kind
        raise ValueError(f"tool {name!r}: cannot resolve its type hints: {exc}") from exc
    params = list(inspect.signature(fn).parameters.values())
    if context:
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise ValueError(f"tool {name!r}: context=True needs a first positional parameter ctx")
        params = params[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise ValueError(f"tool {name!r}: parameter {p} must be passable by keyword")
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (
            hints.get(p.name, Any),
            Field(default, description=arg_docs.get(p.name)),
        )
    config = ConfigDict(extra="forbid", protected_namespaces=())
    try:
        model: type[BaseModel] = create_model(f"{name}_input", __config__=config, **fields)
    except Exception as exc:  # noqa: BLE001 - pydantic raises several error types here
        raise ValueError(f"tool {name!r}: cannot build its input model: {exc}") from exc
    return model


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and its ``Args:`` entries."""
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    indent: int | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        header = _SECTION_RE.match(stripped) if not line[:1].isspace() else None
        if header:
            section, indent, current = header.group(1), None, None
            continue
        if section is None:
            description.append(line)
            continue
        if section not in _ARGS_SECTIONS or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        entry = _ARG_RE.match(stripped) if depth <= indent else None
        if entry:
            current = entry.group(1)
            args[current] = entry.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(description).strip(), args
