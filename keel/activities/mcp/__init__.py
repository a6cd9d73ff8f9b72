"""Tools from MCP servers, run as Keel tool activities.

Public surface (light: the MCP SDK is imported only with ``keel.activities.mcp.servers``)::

    from keel.activities.mcp import parse_mcp_spec, McpServerConfig       # configure servers
    from keel.activities.mcp import McpServerError, McpToolConflict       # stop a worker at start
    from keel.activities.mcp import McpConfigError                        # a bad --mcp value
    from keel.activities.mcp.servers import McpServers                    # what build_worker runs

See docs/mcp.md.
"""

from keel.activities.mcp.config import (
    McpConfigError,
    McpServerConfig,
    McpServerError,
    McpToolConflict,
    McpTransportError,
    effects_variable,
    env_variable,
    headers_variable,
    parse_mcp_spec,
)

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
