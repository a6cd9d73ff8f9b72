"""Tools from MCP servers, run as Keel tool activities.

Public surface (light: the MCP SDK is imported only with ``activities.mcp.servers``)::

    from activities.mcp import parse_mcp_spec, McpServerConfig       # configure servers
    from activities.mcp import McpServerError, McpToolConflict       # stop a worker at start
    from activities.mcp import McpConfigError                        # a bad --mcp value
    from activities.mcp.servers import McpServers                    # what build_worker runs

See docs/mcp.md.
"""

from activities.mcp.config import (
    McpConfigError,
    McpServerConfig,
    McpServerError,
    McpToolConflict,
    McpTransportError,
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
    "env_variable",
    "headers_variable",
    "parse_mcp_spec",
]
