"""``KeelPlugin``: the one place that says what a Keel worker runs.

``Client.connect(address, plugins=[KeelPlugin(tool_modules=[...])])`` gives the client Keel's
data converter; every worker built on that client (a plain ``temporalio.worker.Worker``)
then also runs ``AgentSession`` and Keel's activities, in Keel's workflow sandbox, next to
your own workflows, which call ``keel.run_agent``. ``keel worker``, the worker that
``keel run`` and ``keel dev`` embed, and ``build_worker`` are that same ``Worker(...,
plugins=[KeelPlugin(...)])``: one assembly.

What the plugin adds to a worker:

- ``AgentSession`` and the activities ``keel.model.converse``, ``keel.tool.run``,
  ``keel.notify.post``, ``keel.session.child_report``, ``keel.session.forward`` and
  ``keel.judge.decide``, with the
  plugin's tool modules, MCP servers, store and stream endpoint;
- Keel's workflow sandbox (``keel.worker.process.sandbox``), unless the worker names a runner;
- ``KeelInterceptor`` (turn and cycle on every activity's logs, metrics), behind temporalio's
  ``TracingInterceptor`` when given a tracer provider;
- where the worker keeps temporalio's defaults: a 0.1 s heartbeat throttle (the activities
  pace their own beats), a 1 s sticky schedule-to-start timeout (a dead worker's session moves
  on quickly), the fixed build id ``keel`` (temporalio would hash every loaded module), and a
  thread pool for the blocking activities. A value the worker is given is kept.
- with a deployment and a build id (``KEEL_DEPLOYMENT``, ``KEEL_BUILD_ID``, or the
  plugin's arguments): Worker Deployment Versioning instead of the fixed build id. The worker
  polls as that version, and its workflows are pinned to the version they started on unless
  their definition or a start option says otherwise (``SessionConfig.auto_upgrade``). Once
  it runs, the deployment's first version becomes current by itself; a later one logs that
  it is not current and waits for ``keel deploy promote`` (``keel.worker.client.deployments``).

When: ``KeelPlugin(...)`` only holds its options, so a client-only use (``Client.connect(...,
plugins=[KeelPlugin()])`` to talk to sessions) imports, opens and binds nothing. Connecting a
client reads the settings and makes the data converter; configuring the first worker
(``Worker(...)``) imports the tool modules, opens the store and sets up the activities, which
is where a missing tool module or a bad setting raises; running a worker binds the stream
endpoint (shared by the process's running workers, closed after the last one stops) and
starts the MCP servers the plugin owns.

``replayer`` is the same assembly for replaying histories (``keel deploy check``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.runtime import Runtime
from temporalio.worker import (
    Interceptor,
    Replayer,
    Worker,
    WorkerConfig,
    WorkerDeploymentConfig,
)

from keel.activities.judge import JudgeActivities
from keel.activities.mcp.config import McpServerConfig
from keel.activities.model_call import ModelActivities
from keel.activities.notify import Notifications
from keel.activities.store import ConversationStore, open_store
from keel.activities.store.encrypted import Keyring
from keel.activities.sub_agents import child_report, forward
from keel.activities.tool_run import ToolActivities
from keel.activities.tools import load_tool_modules
from keel.worker.payloads import data_converter
from keel.worker.process.inflight import InflightInterceptor, reclaiming
from keel.worker.process.interceptors import KeelInterceptor
from keel.worker.process.sandbox import sandbox_runner
from keel.worker.process.stream_server import StreamConfig, hold_endpoint, release_endpoint
from keel.worker.process.version_routing import telling_version
from keel.worker.settings import DEFAULT_STICKY_TIMEOUT_S, ConfigError, Settings
from keel.workflows.session import AgentSession

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from keel.activities.mcp.servers import McpServers

BUILD_ID = "keel"
# The SDK sends an activity's heartbeat at once unless one went out less than this ago.
HEARTBEAT_THROTTLE = timedelta(seconds=0.1)
ACTIVITY_THREADS = 16
# temporalio's own defaults: where a worker still has these, the plugin sets Keel's
_SDK_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(Worker.__init__).parameters.items()
    if parameter.default is not inspect.Parameter.empty
}


@dataclasses.dataclass
class _Assembly:
    """What a worker of the plugin runs with, set up when the first one is configured."""

    version: WorkerDeploymentVersion | None
    stream: StreamConfig
    model: ModelActivities
    activities: list[Callable[..., Any]]
    interceptors: list[Interceptor]
    mcp: McpServers | None
    mcp_owned: bool


class KeelPlugin(SimplePlugin):
    """A temporalio plugin adding Keel to a client and to the workers built on it.

    Made, it only holds its options. Keel's data converter is made when a client is connected
    with it; the tool modules, the store, the MCP servers' configuration and the activities
    are set up when the first worker is configured with it (``Worker(...)``), once; the stream
    endpoint is bound while a worker runs, and owned MCP servers run with it.
    """

    def __init__(
        self,
        tool_modules: Sequence[str] = (),
        *,
        settings: Settings | None = None,
        store: ConversationStore | None = None,
        mcp_servers: Sequence[McpServerConfig] | McpServers = (),
        tracer_provider: TracerProvider | None = None,
        stream_config: StreamConfig | None = None,
        sticky_timeout_s: float = DEFAULT_STICKY_TIMEOUT_S,
        deployment: str | None = None,
        build_id: str | None = None,
    ) -> None:
        """Hold the options; nothing is imported, opened or bound until a worker needs it.

        Args:
            tool_modules: modules whose ``@tool`` functions the sessions may use; imported
                when a worker is first configured.
            settings: Keel's settings; default read from the environment once, when first
                needed (a client connected with the plugin, or a worker configured).
            store: the conversation store; default the settings' (``KEEL_STORE`` /
                ``KEEL_HOME``), encrypted with ``KEEL_ENCRYPTION_KEY`` when set.
            mcp_servers: MCP servers whose tools the sessions may use: their configurations
                (connected while a worker runs; a server that does not start stops the
                worker's run with ``McpServerError``), or ``McpServers`` already running,
                whose lifetime stays the caller's.
            tracer_provider: an OpenTelemetry SDK tracer provider
                (``keel.worker.process.telemetry.tracer_provider``): workflows and activities
                traced with temporalio's ``TracingInterceptor`` and Keel's turn spans.
            stream_config: where the stream endpoint (model text for watchers) listens while
                a worker runs; default the settings' (``KEEL_STREAM_LISTEN``,
                ``KEEL_STREAM_ADVERTISE``).
            sticky_timeout_s: the sticky queue's schedule-to-start timeout.
            deployment: the Worker Deployment the workers run in (default the settings',
                ``KEEL_DEPLOYMENT``); with ``build_id``, the workers are versioned.
            build_id: the workers' version in it (default ``KEEL_BUILD_ID``).

        Raises:
            TypeError: ``tool_modules`` is one string, not a list of them.
        """
        if isinstance(tool_modules, str):
            raise TypeError(
                f"tool_modules is a list of module names, not one string: "
                f"KeelPlugin(tool_modules=[{tool_modules!r}])"
            )
        self._tool_modules = list(tool_modules)
        self._given_settings = settings
        self._deployment, self._build_id = deployment, build_id
        self._store = store
        self._mcp_servers = mcp_servers
        self._tracer_provider = tracer_provider
        self._stream_config = stream_config
        self._sticky_timeout = timedelta(seconds=sticky_timeout_s)
        self._settings: Settings | None = None
        self._converter: DataConverter | None = None
        self._assembly: _Assembly | None = None
        self._running = 0  # workers of this plugin running now
        super().__init__(
            "keel",
            data_converter=lambda _: self.converter,
            workflows=[AgentSession],
            activities=lambda given: [*(given or ()), *self.assembly().activities],
        )

    @property
    def settings(self) -> Settings:
        """Keel's settings: those given, else the environment's, read on first use."""
        if self._settings is None:
            settings = self._given_settings or Settings.from_env()
            if self._deployment is not None or self._build_id is not None:
                settings = dataclasses.replace(
                    settings,
                    deployment=self._deployment or settings.deployment,
                    build_id=self._build_id or settings.build_id,
                )
            self._settings = settings
        return self._settings

    @property
    def converter(self) -> DataConverter:
        """Keel's data converter, encrypting with the settings' keys.

        Raises:
            ConfigError: an encryption key is malformed.
        """
        if self._converter is None:
            self._converter = data_converter(self.settings.keyring())
        return self._converter

    @property
    def store(self) -> ConversationStore:
        """The conversation store: the one given, else the settings', opened on first use.

        Opening one writes nothing: a local store's folder is made by its first write.

        Raises:
            ConfigError: an encryption key is malformed.
        """
        if self._store is None:
            self._store = open_store(self.settings.store, self.settings.keyring())
        return self._store

    def assembly(self) -> _Assembly:
        """What the workers run with; set up by the first call (the first worker configured).

        Raises:
            ToolModuleError: a tool module cannot be imported.
            ConfigError: an encryption key, ``KEEL_JUDGE_TIMEOUT_S``, ``KEEL_PRICES`` or the
                stream endpoint's address is malformed; a deployment without a build id (or
                the reverse), or either not a name Temporal takes.
            McpConfigError: two MCP servers have the same name.
        """
        if self._assembly is not None:
            return self._assembly
        loaded = load_tool_modules(self._tool_modules)
        settings = self.settings
        version = settings.deployment_version()
        judge_timeout_s = settings.judge_timeout_s()
        store = self.store
        mcp, owned = None, False
        if isinstance(self._mcp_servers, Sequence):
            if self._mcp_servers:
                from keel.activities.mcp.servers import McpServers  # the MCP SDK only then

                mcp, owned = McpServers(list(self._mcp_servers)), True
        else:
            mcp = self._mcp_servers
        stream = self._stream_config or StreamConfig.of(
            settings.stream_listen, settings.stream_advertise
        )
        # its streams are the endpoint's while a worker runs (``serving``)
        model = ModelActivities(
            store, mcp, None, settings.request_log, settings.environ, settings.prices()
        )
        tools = ToolActivities(store, mcp)
        self._assembly = _Assembly(
            version=version,
            stream=stream,
            model=model,
            activities=[
                model.converse,
                tools.run,
                Notifications(settings.notify_secret).post,
                child_report,
                forward,
                JudgeActivities(settings.environ, loaded, judge_timeout_s).decide,
            ],
            interceptors=[
                *_interceptors(self._tracer_provider),
                *([InflightInterceptor(settings.state_home)] if settings.state_home else []),
            ],
            mcp=mcp,
            mcp_owned=owned,
        )
        return self._assembly

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The stream endpoint up for the block, the model activity streaming to it.

        ``run_worker`` wraps each worker's run in it; the endpoint is bound by the first
        worker of the process that runs, and closed when the last one stops.

        Raises:
            ConfigError: the endpoint's address cannot be listened on.
        """
        assembly = self.assembly()
        streams = hold_endpoint(assembly.stream)
        self._running += 1
        assembly.model.streams = streams
        try:
            yield
        finally:
            self._running -= 1
            if not self._running:
                assembly.model.streams = None
            await asyncio.to_thread(release_endpoint, assembly.stream)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Set up Keel (once), then add its workflow, activities and interceptors and defaults.

        Raises:
            ToolModuleError: a tool module cannot be imported.
            ConfigError: a setting is malformed (see ``assembly``).
            McpConfigError: two MCP servers have the same name.
        """
        assembly = self.assembly()
        config = super().configure_worker(config)
        version = assembly.version
        if version is not None and config.get("deployment_config") is None:
            if config.get("build_id") is not None:
                raise ConfigError(
                    f"the worker has build_id={config.get('build_id')!r} and Keel's deployment "
                    f"version {version.to_canonical_string()!r}: give one"
                )
            config["deployment_config"] = WorkerDeploymentConfig(
                version=version,
                use_worker_versioning=True,
                default_versioning_behavior=VersioningBehavior.PINNED,
            )
        defaults: dict[str, Any] = {
            "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
            "sticky_queue_schedule_to_start_timeout": self._sticky_timeout,
            "workflow_runner": sandbox_runner(),
        }
        if config.get("deployment_config") is None:  # a versioned worker has no build_id
            defaults["build_id"] = BUILD_ID
        for name, value in defaults.items():
            # the very object of temporalio's signature: the worker was given none
            if config.get(name) is _SDK_DEFAULTS.get(name):
                config[name] = value  # type: ignore[literal-required]
        if config.get("activity_executor") is None:
            config["activity_executor"] = ThreadPoolExecutor(max_workers=ACTIVITY_THREADS)
        config["interceptors"] = [*assembly.interceptors, *config.get("interceptors", ())]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker in ``serving``, between its MCP servers' start and close if owned.

        A versioned worker also says, once Temporal lists its version, whether the version
        is current, making it so when it is its deployment's first. Before it polls, and
        now and then while it runs, it gives back to Temporal the activity attempts that dead
        workers of this machine left running (``keel.worker.process.inflight``).
        """
        assembly = self.assembly()
        state_home = self.settings.state_home
        async with contextlib.AsyncExitStack() as stack:
            if state_home is not None:
                await stack.enter_async_context(reclaiming(worker.client, state_home))
            await stack.enter_async_context(self.serving())
            await stack.enter_async_context(telling_version(worker))
            if assembly.mcp is None or not assembly.mcp_owned:
                await next(worker)
                return
            await assembly.mcp.plugin().run_worker(worker, next)


def replayer(
    workflows: Sequence[type] = (AgentSession,),
    *,
    keyring: Keyring | None = None,
    namespace: str = "default",
    runtime: Runtime | None = None,
) -> Replayer:
    """A ``Replayer`` that runs workflows as a Keel worker does.

    The same sandbox, interceptors and data converter (with ``keyring``, encrypted
    payloads decode) as the worker ``KeelPlugin`` assembles; the tool modules whose policies
    the sessions consult must be loaded already (``load_tool_modules``).

    Args:
        workflows: the workflow classes to replay with (default ``AgentSession``).
        keyring: the encryption keys of the histories' payloads.
        namespace: the namespace the histories come from.
        runtime: the temporalio runtime (its logging); default the process-wide one.
    """
    return Replayer(
        workflows=list(workflows),
        namespace=namespace,
        runtime=runtime,
        data_converter=data_converter(keyring),
        workflow_runner=sandbox_runner(),
        interceptors=_interceptors(None),
    )


def _interceptors(provider: TracerProvider | None) -> list[Interceptor]:
    """The tracing interceptor of temporalio (outermost), then Keel's."""
    if provider is None:
        return [KeelInterceptor()]
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from keel.worker.process.tracing import KeelSpans  # the otel extra: only when tracing

    spans = KeelSpans(provider)
    return [TracingInterceptor(spans.tracer), KeelInterceptor(spans)]
