"""The @tool registry and the tool activities, run with Temporal's ActivityEnvironment."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import tests.sample_tools as sample_tools
from keel import (
    ConversationStore,
    Message,
    ToolContext,
    ToolResult,
    ToolUse,
    open_store,
    text_block,
    tool,
)
from keel.activities import tools as registry
from keel.activities.model_call import ModelActivities
from keel.activities.tool_run import ToolActivities, run_tool
from keel.activities.tools import (
    ToolModuleError,
    get_tool,
    load_tool_modules,
    registered_tools,
    specs_for_modules,
    tool_module_name,
)
from keel.workflows.activity_contracts import ModelRequest, ToolRequest
from keel.workflows.activity_options import TOOL_REGISTRY_ERROR
from tests.helpers.scripts import respond, text, write_script

SAMPLE = "tests.sample_tools"
SAMPLE_TOOLS = {
    "echo",
    "add",
    "slow",
    "slow_sync",
    "boom",
    "hang",
    "whoami",
    "record",
    "guarded_record",
    "guarded_note",
    "guarded_always",
    "big",
    "big_async",
    "pick_account",
    "confirm_twice",
    "transfer",
}


@pytest.fixture
def scratch_registry() -> Iterator[None]:
    """Tools registered inside a test disappear after it."""
    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


def make_request(
    name: str,
    tool_input: Any = None,
    *,
    tool_use_id: str = "tu-1",
    timeout_s: float | None = None,
    workflow_id: str = "test",
) -> ToolRequest:
    found = get_tool(name)
    return ToolRequest(
        session_id=workflow_id,
        tool_use=ToolUse(
            toolUseId=tool_use_id, name=name, input={} if tool_input is None else tool_input
        ),
        idempotency_key=f"{workflow_id}/{tool_use_id}",
        timeout_s=timeout_s
        if timeout_s is not None
        else (found.spec.timeout_s if found else 300.0),
    )


async def run(request: ToolRequest, env: ActivityEnvironment | None = None) -> ToolResult:
    response = await (env or ActivityEnvironment()).run(run_tool, request)
    assert response.result.toolUseId == request.tool_use.toolUseId
    return response.result


def text_of(result: ToolResult) -> str:
    assert len(result.content) == 1
    text = result.content[0].text
    assert text is not None
    return text


# --- schema and registry ---------------------------------------------------------------------


def test_schema_from_hints_and_docstring() -> None:
    spec = get_tool("add").spec  # type: ignore[union-attr]
    assert spec.name == "add"
    assert spec.description == "Add two integers."
    assert spec.module == SAMPLE
    assert spec.requires_approval is False
    assert spec.timeout_s == 300.0
    schema = spec.inputSchema
    assert schema["type"] == "object"
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["properties"]["a"]["description"] == "the first addend."
    assert schema["properties"]["b"]["description"] == "the second addend."


def test_context_parameter_is_not_in_schema() -> None:
    entry = get_tool("whoami")
    assert entry is not None and entry.takes_context and not entry.is_async
    assert entry.spec.inputSchema["properties"] == {}
    assert entry.spec.inputSchema["required"] == []
    assert get_tool("hang").spec.timeout_s == 1.0  # type: ignore[union-attr]
    assert get_tool("slow").is_async  # type: ignore[union-attr]


async def test_decorated_functions_stay_callable() -> None:
    assert sample_tools.add(2, 3) == 5
    assert await sample_tools.slow(0, "x") == "x"
    assert sample_tools.whoami(ToolContext("s", "t", "s/t")) == "s/t"


@pytest.mark.usefixtures("scratch_registry")
def test_defaults_untyped_and_missing_docstring() -> None:
    @tool(name="t_plain", requires_approval=True, timeout_s=7)
    def plain(path, count: int = 2, *, flag: bool = False):  # type: ignore[no-untyped-def]
        return path

    spec = get_tool("t_plain").spec  # type: ignore[union-attr]
    assert plain("p") == "p"
    assert spec.description == "t_plain"
    assert spec.requires_approval is True and spec.timeout_s == 7.0
    props = spec.inputSchema["properties"]
    assert spec.inputSchema["required"] == ["path"]
    assert "type" not in props["path"]  # Any
    assert props["count"] == {"default": 2, "title": "Count", "type": "integer"}
    assert props["flag"]["type"] == "boolean"


@pytest.mark.usefixtures("scratch_registry")
def test_docstring_body_and_multiline_args() -> None:
    @tool
    def t_doc(query: str, limit: int = 10) -> list[str]:
        """Search the notes.

        Matches are case-insensitive.

        Args:
            query (str): words to look for,
                all of them.
            limit: at most this many results.

        Returns:
            Matching note titles.
        """
        return []

    spec = get_tool("t_doc").spec  # type: ignore[union-attr]
    assert spec.description == "Search the notes.\n\nMatches are case-insensitive."
    props = spec.inputSchema["properties"]
    assert props["query"]["description"] == "words to look for, all of them."
    assert props["limit"]["description"] == "at most this many results."


@pytest.mark.usefixtures("scratch_registry")
def test_duplicate_name_from_another_function_raises() -> None:
    def echo(text: str) -> str:
        return text

    with pytest.raises(ValueError, match=r"already registered by tests\.sample_tools\.echo") as err:
        tool(echo)
    assert "test_tools" in str(err.value)
    assert get_tool("echo").fn is sample_tools.echo  # type: ignore[union-attr]


@pytest.mark.usefixtures("scratch_registry")
def test_reloading_a_module_does_not_raise() -> None:
    importlib.reload(sample_tools)
    assert get_tool("echo").fn is sample_tools.echo  # type: ignore[union-attr]


@pytest.mark.usefixtures("scratch_registry")
def test_bad_declarations_raise() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="must match"):
        tool(name="has space")(f)
    with pytest.raises(ValueError, match="timeout_s"):
        tool(name="t_zero", timeout_s=0)(f)
    with pytest.raises(ValueError, match="ctx"):
        tool(name="t_noctx", context=True)(lambda: None)
    with pytest.raises(ValueError, match="keyword"):
        tool(name="t_var")(lambda *args: None)


def test_load_tool_modules() -> None:
    assert load_tool_modules([SAMPLE, " ", SAMPLE]) == [SAMPLE]
    with pytest.raises(ToolModuleError, match=r"tool module 'no\.such\.mod' not found: no "):
        load_tool_modules(["no.such.mod"])
    with pytest.raises(ToolModuleError, match=r"tool module 'json' defines no @tool functions"):
        load_tool_modules(["json"])


TOOL_FILE = """
from keel import tool

@tool(name="{name}")
def {name}(text: str) -> str:
    \"\"\"Echo.

    Args:
        text: what to echo.
    \"\"\"
    return text
"""


@pytest.fixture
def user_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None
) -> Iterator[Path]:
    """A user's folder as the working directory; sys.path and sys.modules restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(Path.cwd()))])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_module_is_found_in_the_working_directory(user_folder: Path) -> None:
    (user_folder / "cwd_tools_a.py").write_text(TOOL_FILE.format(name="cwd_tool_a"))
    assert str(user_folder) not in sys.path
    assert load_tool_modules(["cwd_tools_a"]) == ["cwd_tools_a"]
    assert get_tool("cwd_tool_a") is not None
    assert sys.path[-1] == str(user_folder)  # at the end: it shadows nothing installed
    with pytest.raises(ToolModuleError) as missing:
        load_tool_modules(["cwd_tools_none"])
    assert f"no cwd_tools_none.py or cwd_tools_none/__init__.py in {user_folder} or on the" in (
        str(missing.value)
    )


def test_a_file_is_imported_under_its_module_name_from_its_folder(user_folder: Path) -> None:
    lib = user_folder / "lib"
    (lib / "pkg").mkdir(parents=True)
    (lib / "file_tools_b.py").write_text(TOOL_FILE.format(name="file_tool_b"))
    (lib / "pkg" / "__init__.py").write_text("")
    (lib / "pkg" / "more.py").write_text(TOOL_FILE.format(name="file_tool_c"))
    assert tool_module_name("lib/file_tools_b.py") == "file_tools_b"
    assert tool_module_name("./lib/pkg/more.py") == "pkg.more"
    assert tool_module_name("lib/pkg") == "pkg"
    assert tool_module_name("my.tools") == "my.tools"
    loaded = load_tool_modules(["./lib/file_tools_b.py", "lib/pkg/more.py", "file_tools_b"])
    assert loaded == ["file_tools_b", "pkg.more"]
    assert get_tool("file_tool_b") is not None and get_tool("file_tool_c") is not None
    assert {s.name for s in specs_for_modules(["pkg"])} == {"file_tool_c"}
    with pytest.raises(ToolModuleError, match=r"tool file 'lib/gone\.py' not found \(no Python"):
        load_tool_modules(["lib/gone.py"])
    (lib / "2bad.py").write_text("")
    with pytest.raises(ToolModuleError, match=r"'2bad' is not a module name Python can import"):
        tool_module_name("lib/2bad.py")


def test_a_file_named_like_an_installed_module_is_refused(user_folder: Path) -> None:
    (user_folder / "json.py").write_text(TOOL_FILE.format(name="json_tool"))
    with pytest.raises(ToolModuleError, match=r"the name 'json' is taken by .*rename your module"):
        load_tool_modules(["./json.py"])
    assert get_tool("json_tool") is None


def test_a_module_that_imports_what_is_missing_says_that(user_folder: Path) -> None:
    (user_folder / "needs_more.py").write_text("import no_such_dependency_here\n")
    with pytest.raises(
        ToolModuleError,
        match=r"'needs_more' could not be imported: ModuleNotFoundError: .*no_such_dependency",
    ):
        load_tool_modules(["needs_more"])


def test_specs_for_modules() -> None:
    assert {s.name for s in specs_for_modules([SAMPLE])} == SAMPLE_TOOLS
    assert {s.name for s in specs_for_modules(["tests"])} >= SAMPLE_TOOLS
    assert {s.name for s in specs_for_modules([])} == set(registered_tools())
    with pytest.raises(ToolModuleError, match=r"'nope' is not loaded on this worker.*--tools nope"):
        specs_for_modules(["nope"])


async def test_the_first_model_call_describes_the_session_tools(tmp_path: Path) -> None:
    model = write_script(tmp_path / "script.json", [respond(text("ok"))])
    store = open_store(str(tmp_path / "store"))

    def first_call(modules: list[str]) -> ModelRequest:
        user = Message(role="user", content=[text_block("hi")])
        return ModelRequest(
            session_id="s", turn=1, cycle=1, model=model,
            messages=[user], describe_modules=modules,
        )

    env = ActivityEnvironment()
    response = await env.run(ModelActivities(store).converse, first_call([SAMPLE]))
    assert {s.name for s in response.tools or []} == SAMPLE_TOOLS
    assert all(s.description == "" for s in response.tools or [])  # terms only, not the specs
    assert response.tools_digest is not None
    with pytest.raises(ApplicationError) as err:
        await env.run(ModelActivities(store).converse, first_call(["nope"]))
    assert err.value.type == TOOL_REGISTRY_ERROR
    assert err.value.non_retryable
    assert "--tools nope" in str(err.value)


# --- running tools ---------------------------------------------------------------------------


async def test_text_and_json_results() -> None:
    result = await run(make_request("echo", {"text": "hi"}))
    assert result.status == "success"
    assert result.model_dump() == {
        "toolUseId": "tu-1",
        "status": "success",
        "content": [{"text": "hi"}],
    }
    result = await run(make_request("add", {"a": 2, "b": 3}, tool_use_id="tu-2"))
    assert result.status == "success"
    assert result.model_dump()["content"] == [{"json": 5}]


async def test_invalid_input_is_an_error_result() -> None:
    result = await run(make_request("add", {"a": "x"}))
    assert result.status == "error"
    text = text_of(result)
    assert "invalid input for tool 'add'" in text
    assert "a: Input should be a valid integer" in text
    assert "b: Field required" in text
    extra = text_of(await run(make_request("echo", {"text": "t", "colour": "red"})))
    assert "colour: Extra inputs are not permitted" in extra
    not_a_dict = await run(make_request("echo", "hello"))
    assert not_a_dict.status == "error"


async def test_unknown_tool_is_an_error_result() -> None:
    result = await run(make_request("nosuch"))
    assert result.status == "error"
    text = text_of(result)
    assert text.startswith("unknown tool 'nosuch'; this session has: ")
    assert "echo" in text and "add" in text


async def test_raising_tool_is_an_error_result() -> None:
    result = await run(make_request("boom", {"message": "kaboom"}))
    assert result.status == "error"
    assert text_of(result) == "tool 'boom' failed: RuntimeError: kaboom"


async def test_timeout_is_enforced_inside_the_activity() -> None:
    started = time.monotonic()
    result = await run(make_request("hang"))
    elapsed = time.monotonic() - started
    assert result.status == "error"
    assert text_of(result) == "tool 'hang' timed out after 1 s"
    assert 0.9 < elapsed < 3


async def test_sync_tool_runs_off_the_event_loop() -> None:
    started = time.monotonic()
    results = await asyncio.gather(
        run(make_request("slow_sync", {"seconds": 0.5, "label": "one"}, tool_use_id="a")),
        run(make_request("slow_sync", {"seconds": 0.5, "label": "two"}, tool_use_id="b")),
    )
    assert time.monotonic() - started < 0.9
    assert [text_of(r) for r in results] == ["one", "two"]


async def test_heartbeats_while_a_sync_tool_runs() -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    beats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *args: beats.append(args)
    result = await run(make_request("slow_sync", {"seconds": 0.6, "label": "x"}), env)
    assert result.status == "success"
    assert len(beats) >= 3
    sent = len(beats)
    await asyncio.sleep(0.35)
    assert len(beats) == sent, "heartbeats went on after the tool returned"


async def test_context_tool_gets_the_idempotency_key() -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="wf-42")
    request = make_request("whoami", tool_use_id="tu-9", workflow_id="wf-42")
    result = await run(request, env)
    assert result.status == "success"
    assert text_of(result) == "wf-42/tu-9" == request.idempotency_key


async def test_side_effect_tool(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    result = await run(make_request("record", {"path": str(path), "value": "v1"}))
    assert text_of(result) == "recorded v1"
    assert path.read_text() == "v1\n"


@pytest.mark.usefixtures("scratch_registry")
async def test_return_values() -> None:
    @tool
    def t_object() -> object:
        return object()

    @tool
    def t_nested_set() -> dict[str, Any]:
        return {"a": {1, 2}}

    @tool
    def t_none() -> None:
        return None

    @tool
    def t_dict() -> dict[str, Any]:
        return {"a": [1, 2.5, True, None]}

    @tool
    def t_info() -> str:
        return activity.info().workflow_id or ""

    for name, kind in [("t_object", "object"), ("t_nested_set", "dict")]:
        result = await run(make_request(name))
        assert result.status == "error"
        assert text_of(result) == (
            f"tool {name!r} returned a value that is not JSON-serialisable: {kind}"
        )
    assert text_of(await run(make_request("t_none"))) == "null"
    dumped = (await run(make_request("t_dict"))).model_dump()
    assert dumped["content"] == [{"json": {"a": [1, 2.5, True, None]}}]
    assert text_of(await run(make_request("t_info"))) == "test"


@pytest.mark.usefixtures("scratch_registry")
async def test_cancelling_the_activity_cancels_the_tool() -> None:
    started = asyncio.Event()
    outcome: list[str] = []

    @tool
    async def t_wait(seconds: float) -> str:
        started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "done"

    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(run_tool, make_request("t_wait", {"seconds": 10})))
    await asyncio.wait_for(started.wait(), 5)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    await asyncio.sleep(0)
    assert outcome == ["cancelled"]


async def test_cancelling_a_running_sample_tool_raises() -> None:
    env = ActivityEnvironment()
    task = asyncio.create_task(
        env.run(run_tool, make_request("slow", {"seconds": 10, "label": "never"}))
    )
    await asyncio.sleep(0.2)
    env.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1


class _Backend:
    """An in-memory blob backend that can be told to fail its writes; notes writers' threads."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.broken = False
        self.threads: set[int] = set()

    def put(self, key: str, data: bytes) -> None:
        self.threads.add(threading.get_ident())
        if self.broken:
            raise OSError("disk full")
        self.blobs[key] = data

    def get(self, key: str) -> bytes:
        return self.blobs[key]


@pytest.mark.parametrize(
    ("name", "tool_input"),
    [("big", {"size": 40}), ("slow", {"seconds": 0.01, "label": "done"})],  # sync, async
)
async def test_tool_activity_stores_the_result_and_returns_only_its_reference(
    name: str, tool_input: dict[str, Any]
) -> None:
    backend = _Backend()
    store = ConversationStore(backend)
    request = make_request(name, tool_input)
    expected = (await ActivityEnvironment().run(run_tool, request)).result
    assert expected is not None and expected.content
    response = await ActivityEnvironment().run(ToolActivities(store).run, request)
    # the tool's output stays out of workflow history: the response names it by digest
    assert response.result == expected.model_copy(update={"content": []})
    assert response.digest is not None
    stored = ConversationStore(backend).get_document(response.digest)
    assert stored == {"toolResult": expected.model_dump(mode="json")}
    # A sync tool's result is stored in the tool's thread, an async tool's in a worker thread:
    # never on the event loop.
    assert backend.threads and threading.get_ident() not in backend.threads, backend.threads


async def test_a_store_failure_fails_the_attempt_instead_of_reaching_the_model() -> None:
    backend = _Backend()
    backend.broken = True
    activities = ToolActivities(ConversationStore(backend))
    with pytest.raises(OSError, match="disk full"):
        await ActivityEnvironment().run(activities.run, make_request("big", {"size": 40}))


def test_a_tool_that_asks_every_time_says_so_in_its_spec() -> None:
    entry = registry.get_tool("guarded_always")
    assert entry is not None and entry.spec.requires_approval == "always"
    with pytest.raises(ValueError, match="True, False or 'always'"):
        tool(requires_approval="sometimes")(lambda: "x")  # type: ignore[arg-type]
