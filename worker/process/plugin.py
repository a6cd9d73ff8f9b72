"""``KeelPlugin``: Keel inside a Temporal application of your own.

``Client.connect(address, plugins=[KeelPlugin(tool_modules=[...])])`` gives the client Keel's
data converter; every worker built on that client (a plain ``temporalio.worker.Worker``)
then also runs ``AgentSession`` and Keel's activities, in Keel's workflow sandbox, next to
your own workflows, which call ``workflows.run_agent``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker

from activities.mcp.config import McpServerConfig
from activities.model_call import ModelActivities
from activities.notify import post_notification
from activities.store import ConversationStore, open_store
from activities.sub_agents import child_report, forward
from activities.tool_run import ToolActivities
from activities.tools import load_tool_modules
from worker.payloads import data_converter
from worker.process.sandbox import sandbox_runner
from worker.process.stream_server import StreamConfig, stream_endpoint
from worker.settings import Settings
from workflows.session import AgentSession

if TYPE_CHECKING:
    from activities.mcp.servers import McpServers


class KeelPlugin(SimplePlugin):
    """A temporalio plugin adding Keel to a client and to the workers built on it.

    On the client: Keel's data converter (pydantic payloads). On a worker: ``AgentSession``,
    the model and tool activities (with the plugin's tool modules, MCP servers and store),
    and Keel's workflow sandbox (which also runs your workflows).
    """

    def __init__(
        self,
        tool_modules: Sequence[str] = (),
        *,
        store: ConversationStore | None = None,
        mcp_servers: Sequence[McpServerConfig] = (),
    ) -> None:
        """Load the tool modules and open the store now; MCP servers start with a worker.

        Args:
            tool_modules: modules whose ``@tool`` functions the sessions may use.
            store: the conversation store; default from ``KEEL_STORE`` / ``KEEL_HOME``.
            mcp_servers: MCP servers whose tools the sessions may use; connected while a
                worker runs.

        Raises:
            ToolModuleError: a tool module cannot be imported.
            ConfigError: ``KEEL_ENCRYPTION_KEY`` or ``KEEL_DECRYPTION_KEYS`` is not a key, or
                ``KEEL_STREAM_LISTEN`` cannot be listened on.
        """
        load_tool_modules(list(tool_modules))
        settings = Settings.from_env()
        keyring = settings.keyring()  # KEEL_ENCRYPTION_KEY: payloads and store objects sealed
        store = store if store is not None else open_store(settings.store, keyring)
        converter = data_converter(keyring)
        self._mcp: McpServers | None = None
        if mcp_servers:
            from activities.mcp.servers import McpServers  # the MCP SDK only when needed

            self._mcp = McpServers(list(mcp_servers))
        streams = stream_endpoint(StreamConfig.from_env(os.environ))  # text for watchers
        model = ModelActivities(store, self._mcp, streams)
        tools = ToolActivities(store, self._mcp)
        super().__init__(
            "keel",
            data_converter=lambda _: converter,
            workflows=[AgentSession],
            activities=[model.converse, tools.run, post_notification, child_report, forward],
            workflow_runner=lambda _: sandbox_runner(),
        )

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker, between its MCP servers' start and close when it has any."""
        if self._mcp is None:
            await next(worker)
            return
        await self._mcp.plugin().run_worker(worker, next)
