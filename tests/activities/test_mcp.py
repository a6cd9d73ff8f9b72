"""MCP servers' tools (activities/mcp): the --mcp parser, results as Converse blocks, the
worker's start (servers that do not start, duplicate tool names), and calls on real servers."""

from __future__ import annotations

import asyncio
import base64
import sys
from dataclasses import replace
from pathlib import Path

import mcp_types as types
import pytest

import keel.activities.tools as tools_module
from keel.activities.mcp import (
    McpConfigError,
    McpServerConfig,
    McpServerError,
    McpToolConflict,
    McpTransportError,
    headers_variable,
    parse_mcp_spec,
)
from keel.activities.mcp.results import result_content
from keel.activities.mcp.servers import McpServers
from keel.activities.tools import ToolModuleError, get_tool, load_tool_modules, specs_for_modules
from keel.workflows.contracts import ToolSpec
from tests.helpers.fixture_types import RunWorker
from tests.helpers.mcp import Everything, children_running, hostile_server, time_server

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()

# ----------------------------------------------------------------------------- the parser


def test_a_command_is_split_like_a_shell_would() -> None:
    env = {"KEEL_MCP_GIT_ENV": '{"GIT_AUTHOR_NAME": "keel"}', "SECRET": "x"}
    config = parse_mcp_spec("git=mcp-server-git --repository 'my repo'", env)
    assert config.name == "git" and config.url is None
    assert config.command == ("mcp-server-git", "--repository", "my repo")
    assert config.module == "mcp:git"
    assert dict(config.env) == {"GIT_AUTHOR_NAME": "keel"}  # only what the variable names


def test_a_url_is_streamable_http_with_headers_from_the_environment() -> None:
    env = {"KEEL_MCP_DOCS_2_HEADERS": '{"Authorization": "Bearer s3cret"}'}
    config = parse_mcp_spec("docs-2=https://example.test/mcp", env)
    assert config.url == "https://example.test/mcp" and config.command == ()
    assert dict(config.headers) == {"Authorization": "Bearer s3cret"}
    assert headers_variable("docs-2") == "KEEL_MCP_DOCS_2_HEADERS"
    assert "s3cret" not in config.describe()


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("mcp-server-git", "expected NAME=COMMAND"),
        ("git=", "expected NAME=COMMAND"),
        ("=mcp-server-git", "expected NAME=COMMAND"),
        ("g it=mcp-server-git", "server name 'g it'"),
        ("git=mcp-server-git 'unbalanced", "cannot split the command"),
    ],
)
def test_bad_specs_are_refused_clearly(spec: str, error: str) -> None:
    with pytest.raises(McpConfigError, match=error):
        parse_mcp_spec(spec, {})


def test_bad_headers_are_refused_clearly() -> None:
    with pytest.raises(McpConfigError, match="KEEL_MCP_API_HEADERS is not JSON"):
        parse_mcp_spec("api=http://h/mcp", {"KEEL_MCP_API_HEADERS": "Authorization: x"})
    with pytest.raises(McpConfigError, match="JSON object of strings"):
        parse_mcp_spec("api=http://h/mcp", {"KEEL_MCP_API_HEADERS": '{"A": 1}'})


def test_two_servers_of_one_name_are_refused() -> None:
    with pytest.raises(McpConfigError, match="'t' is given twice"):
        McpServers([parse_mcp_spec("t=a"), parse_mcp_spec("t=b")])


# ----------------------------------------------------------------------------- results


def call_result(
    *content: object, structured: object = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(
        content=list(content), structured_content=structured, is_error=error
    )  # type: ignore[arg-type]


def test_text_structured_and_image_content_become_converse_blocks() -> None:
    blocks = result_content(
        call_result(
            types.TextContent(type="text", text='{"a": 1}'),  # repeats the structured content
            types.TextContent(type="text", text="and a remark"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
            structured={"a": 1},
        )
    )
    dumped = [b.model_dump(mode="json") for b in blocks]
    assert dumped[0] == {"json": {"a": 1}}
    assert dumped[1] == {"text": "and a remark"}
    assert dumped[2]["image"]["format"] == "png"
    assert blocks[2].image is not None and blocks[2].image.source.bytes == base64.b64decode(PNG)
    assert len(blocks) == 3


def test_other_content_is_described_in_text() -> None:
    blocks = result_content(
        call_result(
            types.ImageContent(type="image", data=PNG, mime_type="image/svg+xml"),
            types.AudioContent(type="audio", data=PNG, mime_type="audio/wav"),
            types.ResourceLink(
                type="resource_link", name="f", uri="file:///f", description="a file"
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///t", text="hello"),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///b", blob=PNG, mime_type="application/zip"
                ),
            ),
        )
    )
    texts = [b.text for b in blocks]
    assert texts == [
        "[image of type image/svg+xml, not shown]",
        "[audio of type audio/wav, not shown]",
        "[resource link f <file:///f>: a file]",
        "[resource <file:///t>]\nhello",
        "[resource <file:///b> of type application/zip, not shown]",
    ]
    assert [b.text for b in result_content(call_result())] == ["(the tool returned no content)"]


def test_a_wrapped_text_answer_stays_text() -> None:
    blocks = result_content(
        call_result(types.TextContent(type="text", text="hi"), structured={"result": "hi"})
    )
    assert [b.model_dump(mode="json") for b in blocks] == [{"text": "hi"}]


# ----------------------------------------------------------------------------- tool specs


def test_sessions_name_servers_as_mcp_modules() -> None:
    import tests.sample_tools  # noqa: F401 - registers some @tool functions

    extra = [
        ToolSpec(name="t1", description="d", inputSchema={}, module="mcp:time"),
        ToolSpec(name="g1", description="d", inputSchema={}, module="mcp:git"),
    ]
    assert [s.name for s in specs_for_modules(["mcp:git"], extra)] == ["g1"]
    everything = [s.name for s in specs_for_modules([], extra)]
    assert everything[-2:] == ["t1", "g1"] and len(everything) > 2  # @tool ones first
    with pytest.raises(ToolModuleError, match="MCP server 'nope' is not configured"):
        specs_for_modules(["mcp:nope"], extra)


def test_loading_tool_modules_skips_mcp_entries() -> None:
    # `keel run --tools mcp:git,tests.sample_tools` hands both to the worker and the session
    assert load_tool_modules(["mcp:git", "tests.sample_tools"]) == ["tests.sample_tools"]


# ----------------------------------------------------------------------------- start


async def test_a_server_that_is_not_installed_stops_the_start() -> None:
    servers = McpServers([parse_mcp_spec("ghost=keel-no-such-mcp-server --flag")])
    with pytest.raises(McpServerError, match="MCP server 'ghost' .* did not start") as err:
        await servers.start()
    assert err.value.server == "ghost"


async def test_a_server_that_exits_at_once_stops_the_start() -> None:
    config = McpServerConfig(name="quitter", command=(sys.executable, "-c", "pass"))
    with pytest.raises(McpServerError, match="MCP server 'quitter'"):
        await McpServers([config]).start()


async def test_a_server_that_never_answers_stops_the_start() -> None:
    config = McpServerConfig(name="mute", command=("sleep", "60"), start_timeout_s=2)
    with pytest.raises(McpServerError, match="'mute' .* did not answer initialize within 2 s"):
        await McpServers([config]).start()
    await asyncio.sleep(0.2)
    assert children_running("sleep 60") == []  # the silent process was stopped


async def test_the_same_tool_from_two_servers_stops_the_start() -> None:
    servers = McpServers([time_server("t1"), time_server("t2")])
    with pytest.raises(McpToolConflict, match="by mcp:t1 and by mcp:t2") as err:
        await servers.start()
    assert err.value.tool == "get_current_time"
    assert children_running("mcp-server-time") == []  # t1's connection was closed again


async def test_an_mcp_tool_named_like_a_tool_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tests.sample_tools  # noqa: F401 - registers echo

    echo = get_tool("echo")
    assert echo is not None
    clash = replace(echo, name="mcpt_key", spec=echo.spec.model_copy(update={"name": "mcpt_key"}))
    monkeypatch.setitem(tools_module._REGISTRY, "mcpt_key", clash)
    with pytest.raises(McpToolConflict, match="by mcp:hostile and by tests.sample_tools"):
        await McpServers([hostile_server()]).start()


async def test_only_the_tools_asked_for_are_offered() -> None:
    config = replace(hostile_server(), tools=("mcpt_key",))
    servers = McpServers([config])
    async with servers.running():
        assert [s.name for s in servers.specs()] == ["mcpt_key"]
    with pytest.raises(McpServerError, match=r"does not offer the tools \['nope'\]"):
        await McpServers([replace(config, tools=("nope",))]).start()


async def test_a_worker_with_a_broken_server_does_not_start(run_worker: RunWorker) -> None:
    with pytest.raises(McpServerError, match="MCP server 'ghost'"):
        async with run_worker(mcp_servers=[parse_mcp_spec("ghost=keel-no-such-mcp-server")]):
            await asyncio.sleep(30)


# ----------------------------------------------------------------------------- calls


async def test_calls_carry_the_idempotency_key_and_reconnect_after_a_kill() -> None:
    servers = McpServers([hostile_server()])
    async with servers.running():
        tool = servers.get("mcpt_key")
        assert tool is not None and tool.spec.module == "mcp:hostile"
        answer = await servers.call(tool, {}, "s1", "s1/use-1")
        assert result_content(answer)[0].text == "s1/use-1"
        [pid] = children_running("tests.mcp_servers.hostile")
        import os
        import signal

        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.5)
        # the call in flight (here: the next one) fails so Temporal retries it ...
        with pytest.raises(McpTransportError, match="connection lost"):
            await servers.call(tool, {}, "s1", "s1/use-2")
        # ... and the retry runs on a new connection to a new process
        answer = await servers.call(tool, {}, "s1", "s1/use-2")
        assert result_content(answer)[0].text == "s1/use-2"
        assert servers.connection("hostile").opened == 2
        assert children_running("tests.mcp_servers.hostile") != [pid]
    await asyncio.sleep(0.2)
    assert children_running("tests.mcp_servers.hostile") == []  # closed with the worker


async def test_a_cancelled_call_is_cancelled_on_the_server(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    servers = McpServers([hostile_server(log=log)])
    async with servers.running():
        tool = servers.get("mcpt_slow")
        assert tool is not None
        call = asyncio.create_task(servers.call(tool, {"seconds": 5, "label": "x"}, "s", "s/1"))
        while not log.exists():
            await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # the connection still works, and the cancelled call never finished
        answer = await servers.call(servers.get("mcpt_key"), {}, "s", "s/2")  # type: ignore[arg-type]
        assert result_content(answer)[0].text == "s/2"
        await asyncio.sleep(5.5)
    assert '"end"' not in log.read_text()


async def test_an_http_server_that_restarted_is_reconnected() -> None:
    everything = Everything()
    try:
        servers = McpServers(
            [McpServerConfig(name="every", url=everything.url, tools=("get-sum",))]
        )
        async with servers.running():
            tool = servers.get("get-sum")
            assert tool is not None
            answer = await servers.call(tool, {"a": 1, "b": 2}, "s", "s/1")
            assert "3" in (result_content(answer)[0].text or "")
            everything.restart()  # the new server does not know our session
            with pytest.raises(McpTransportError):
                await servers.call(tool, {"a": 2, "b": 2}, "s", "s/2")
            answer = await servers.call(tool, {"a": 2, "b": 2}, "s", "s/2")  # Temporal's retry
            assert "4" in (result_content(answer)[0].text or "")
            assert servers.connection("every").opened == 2
    finally:
        everything.stop()
