"""MCP tools' effect classes: from the servers' annotations, overridden per server, and as the
worker reports them to a session (real servers: mcp-server-time, server-everything, ours)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import mcp_types as types
import pytest

from keel import KeelClient
from keel.activities.mcp import McpConfigError, McpServerConfig, McpServerError, parse_mcp_spec
from keel.activities.mcp.servers import McpServers, annotated_effect
from keel.workflows.contracts import ToolSpec
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.mcp import everything_http, hostile_server, time_server
from tests.helpers.scripts import respond, text
from tests.helpers.temporal import run_histories
from tests.workflows.test_long_running import model_results

# ----------------------------------------------------------------------------- annotations


def _tool(**hints: bool) -> types.Tool:
    annotations = types.ToolAnnotations(**hints) if hints else None
    return types.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "effect"),
    [
        ({}, "write"),  # no hints: MCP takes a tool to be destructive, not idempotent
        ({"read_only_hint": True}, "read"),
        ({"read_only_hint": True, "idempotent_hint": False}, "read"),
        ({"read_only_hint": False, "idempotent_hint": True}, "idempotent"),
        ({"idempotent_hint": True, "destructive_hint": True}, "idempotent"),
        ({"read_only_hint": False, "destructive_hint": False}, "write"),  # additive: twice
        ({"idempotent_hint": False, "open_world_hint": False}, "write"),
    ],
)
def test_an_effect_follows_the_annotations(hints: dict[str, bool], effect: str) -> None:
    assert annotated_effect(_tool(**hints)) == effect


def test_annotations_as_a_server_sends_them_are_read() -> None:
    wire = {
        "name": "t",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": False, "idempotentHint": True},
    }
    assert annotated_effect(types.Tool.model_validate(wire)) == "idempotent"


# ----------------------------------------------------------------------------- configuration


def test_a_bad_effect_names_the_server_the_tool_and_the_classes() -> None:
    with pytest.raises(McpConfigError) as err:
        McpServerConfig(name="pay", command=("x",), effects={"refund": "rw"})  # type: ignore[dict-item]
    message = str(err.value)
    assert "'pay'" in message and "'refund'" in message and "'rw'" in message
    assert "read, idempotent, write" in message
    with pytest.raises(McpConfigError, match="'no way' is not a tool name"):
        McpServerConfig(name="pay", command=("x",), effects={"no way": "read"})


def test_mcp_effects_come_from_the_environment_for_a_flag() -> None:
    environ = {"KEEL_MCP_PAY_2_EFFECTS": '{"refund": "write", "lookup": "read"}'}
    config = parse_mcp_spec("pay-2=pay-server --live", environ)
    assert dict(config.effects) == {"refund": "write", "lookup": "read"}
    http = parse_mcp_spec("pay-2=https://pay.example/mcp", environ)
    assert dict(http.effects) == {"refund": "write", "lookup": "read"}
    assert dict(parse_mcp_spec("other=pay-server", environ).effects) == {}
    with pytest.raises(McpConfigError, match=r"KEEL_MCP_PAY_EFFECTS: MCP server 'pay'.*'refund'"):
        parse_mcp_spec("pay=pay-server", {"KEEL_MCP_PAY_EFFECTS": '{"refund": "maybe"}'})
    with pytest.raises(McpConfigError, match="KEEL_MCP_PAY_EFFECTS must be a JSON object"):
        parse_mcp_spec("pay=pay-server", {"KEEL_MCP_PAY_EFFECTS": '["read"]'})


# ----------------------------------------------------------------------------- real servers


def _effects(specs: list[ToolSpec]) -> dict[str, str]:
    return {s.name: s.effect for s in specs}


async def test_mcp_server_time_declares_its_tools_read_only() -> None:
    servers = McpServers([time_server()])
    async with servers.running():
        assert _effects(servers.specs()) == {"get_current_time": "read", "convert_time": "read"}


async def test_tools_without_annotations_are_write_and_a_config_overrides() -> None:
    servers = McpServers([hostile_server()])
    async with servers.running():
        effects = _effects(servers.specs())
    assert effects.pop("mcpt_slow") == "idempotent"  # our server's one annotated tool
    assert set(effects.values()) == {"write"} and "mcpt_key" in effects
    chosen = replace(hostile_server(), effects={"mcpt_key": "read", "mcpt_huge": "idempotent"})
    servers = McpServers([chosen, time_server(effects={"convert_time": "write"})])
    async with servers.running():
        effects = _effects(servers.specs())
    assert effects["mcpt_key"] == "read" and effects["mcpt_huge"] == "idempotent"
    assert effects["mcpt_fail"] == "write"
    assert effects["convert_time"] == "write" and effects["get_current_time"] == "read"


async def test_effects_for_a_tool_the_server_does_not_offer_stop_the_start() -> None:
    config = time_server(effects={"get_current_tme": "read"})
    with pytest.raises(McpServerError, match=r"does not offer: \['get_current_tme'\]") as err:
        await McpServers([config]).start()
    assert err.value.server == "time"
    limited = time_server(tools=("get_current_time",), effects={"convert_time": "write"})
    with pytest.raises(McpServerError, match=r"\['convert_time'\]"):
        await McpServers([limited]).start()


async def test_server_everything_declares_all_three_classes() -> None:
    with everything_http() as url:
        # not its echo: a test tool module loaded in this process has one (names are unique)
        offered = (
            "get-sum",
            "get-annotated-message",
            "gzip-file-as-resource",
            "toggle-simulated-logging",
        )
        servers = McpServers([McpServerConfig(name="every", url=url, tools=offered)])
        async with servers.running():
            effects = _effects(servers.specs())
    # what @modelcontextprotocol/server-everything declares (readOnlyHint / idempotentHint)
    assert effects["get-sum"] == "read" and effects["get-annotated-message"] == "read"
    assert effects["gzip-file-as-resource"] == "idempotent"  # readOnly false, idempotent
    assert effects["toggle-simulated-logging"] == "write"  # neither
    assert set(effects.values()) == {"read", "idempotent", "write"}


async def test_the_worker_reports_mcp_effects_to_the_session(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    config = script([respond(text("nothing to run"))], tool_modules=["mcp:time", "mcp:every"])
    session = f"mcp-effects-{uuid.uuid4().hex[:8]}"
    with everything_http() as url:
        offered = ("get-sum", "gzip-file-as-resource", "toggle-simulated-logging")  # not echo
        every = McpServerConfig(name="every", url=url, tools=offered, effects={"get-sum": "write"})
        async with run_worker(mcp_servers=[time_server(), every]):
            record = await keel.run(session, "hello", config=config, timeout_s=60)
    assert record.status == "completed", record
    [described] = [r for r in model_results((await run_histories(keel.client, session))[0])]
    terms = {t["name"]: t.get("effect", "write") for t in described["tools"]}
    assert terms["get_current_time"] == "read" and terms["convert_time"] == "read"
    assert terms["gzip-file-as-resource"] == "idempotent"
    assert terms["toggle-simulated-logging"] == "write"
    assert terms["get-sum"] == "write"  # the server says read; the worker's config overrides
