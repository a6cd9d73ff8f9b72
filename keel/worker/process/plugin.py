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

``replayer`` is the same assembly for replaying histories (``keel deploy check``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.plugin import SimplePlugin
from temporalio.runtime import Runtime
from temporalio.service import RPCError
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
from keel.worker.client.deployments import make_first_version_current
from keel.worker.payloads import data_converter
from keel.worker.process.interceptors import KeelInterceptor
from keel.worker.process.sandbox import sandbox_runner
from keel.worker.process.stream_server import StreamConfig, stream_endpoint
from keel.worker.settings import DEFAULT_STICKY_TIMEOUT_S, ConfigError, Settings
from keel.workflows.session import AgentSession

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from keel.activities.mcp.servers import McpServers

logger = logging.getLogger("keel.worker")

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


class KeelPlugin(SimplePlugin):
    """A temporalio plugin adding Keel to a client and to the workers built on it."""

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
        """Load the tool modules and open the store now; MCP servers start with a worker.

        Long on purpose (past 80 lines): most of it is this docstring; the body is the assembly, in
        one place.

        Args:
            tool_modules: modules whose ``@tool`` functions the sessions may use.
            settings: Keel's settings; default read from the environment once, here.
            store: the conversation store; default the settings' (``KEEL_STORE`` /
                ``KEEL_HOME``), encrypted with ``KEEL_ENCRYPTION_KEY`` when set.
            mcp_servers: MCP servers whose tools the sessions may use: their configurations
                (connected while a worker runs; a server that does not start stops the
                worker's run with ``McpServerError``), or ``McpServers`` already running,
                whose lifetime stays the caller's.
            tracer_provider: an OpenTelemetry SDK tracer provider
                (``keel.worker.process.telemetry.tracer_provider``): workflows and activities
                traced with temporalio's ``TracingInterceptor`` and Keel's turn spans.
            stream_config: where the stream endpoint (model text for watchers) listens;
                default the settings' (``KEEL_STREAM_LISTEN``, ``KEEL_STREAM_ADVERTISE``).
            sticky_timeout_s: the sticky queue's schedule-to-start timeout.
            deployment: the Worker Deployment the workers run in (default the settings',
                ``KEEL_DEPLOYMENT``); with ``build_id``, the workers are versioned.
            build_id: the workers' version in it (default ``KEEL_BUILD_ID``).

        Raises:
            ToolModuleError: a tool module cannot be imported.
            ConfigError: an encryption key or the stream endpoint's address is malformed,
                or the endpoint cannot be listened on; a deployment without a build id (or
                the reverse), or either not a name Temporal takes.
            McpConfigError: two MCP servers have the same name.
        """
        loaded = load_tool_modules(list(tool_modules))
        settings = settings if settings is not None else Settings.from_env()
        if deployment is not None or build_id is not None:
            settings = dataclasses.replace(
                settings,
                deployment=deployment or settings.deployment,
                build_id=build_id or settings.build_id,
            )
        self.version: WorkerDeploymentVersion | None = settings.deployment_version()
        keyring = settings.keyring()
        self.store = store if store is not None else open_store(settings.store, keyring)
        self.converter = data_converter(keyring)
        self._mcp: McpServers | None = None
        self._mcp_owned = False
        if isinstance(mcp_servers, Sequence):
            if mcp_servers:
                from keel.activities.mcp.servers import McpServers  # the MCP SDK only then

                self._mcp, self._mcp_owned = McpServers(list(mcp_servers)), True
        else:
            self._mcp = mcp_servers
        stream = stream_config or StreamConfig.of(settings.stream_listen, settings.stream_advertise)
        streams = stream_endpoint(stream)
        model = ModelActivities(
            self.store, self._mcp, streams, settings.request_log, settings.environ
        )
        tools = ToolActivities(self.store, self._mcp)
        self._sticky_timeout = timedelta(seconds=sticky_timeout_s)
        self.interceptors_added = _interceptors(tracer_provider)
        super().__init__(
            "keel",
            data_converter=lambda _: self.converter,
            workflows=[AgentSession],
            activities=[
                model.converse,
                tools.run,
                Notifications(settings.notify_secret).post,
                child_report,
                forward,
                JudgeActivities(settings.environ, loaded, settings.judge_timeout_s()).decide,
            ],
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add Keel's workflow, activities and interceptors; set Keel's defaults."""
        config = super().configure_worker(config)
        if self.version is not None and config.get("deployment_config") is None:
            if config.get("build_id") is not None:
                raise ConfigError(
                    f"the worker has build_id={config.get('build_id')!r} and Keel's deployment "
                    f"version {self.version.to_canonical_string()!r}: give one"
                )
            config["deployment_config"] = WorkerDeploymentConfig(
                version=self.version,
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
        config["interceptors"] = [*self.interceptors_added, *config.get("interceptors", ())]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker, between its MCP servers' start and close when the plugin owns them.

        A versioned worker also says, once Temporal lists its version, whether the version
        is current, making it so when it is its deployment's first.
        """
        async with _telling_version(worker):
            if self._mcp is None or not self._mcp_owned:
                await next(worker)
                return
            await self._mcp.plugin().run_worker(worker, next)


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


@contextlib.asynccontextmanager
async def _telling_version(worker: Worker) -> AsyncIterator[None]:
    """While the block runs, tell whether a versioned worker's version is current."""
    deployment = worker.config(active_config=True).get("deployment_config")
    if deployment is None or not deployment.use_worker_versioning:
        yield
        return
    task = asyncio.create_task(_tell_version(worker.client, deployment.version))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _tell_version(client: Client, version: WorkerDeploymentVersion) -> None:
    """Make the deployment's first version current; log whether this version is."""
    name, build_id = version.deployment_name, version.build_id
    try:
        routing = await make_first_version_current(client, version)
    except (RPCError, TimeoutError) as err:
        logger.warning(
            "version %s of Worker Deployment %s: routing unknown: %s", build_id, name, err
        )
        return
    if routing.current == build_id:
        how = (
            "made current: the deployment had no current version" if routing.claimed else "current"
        )
        logger.info(
            "version %s of Worker Deployment %s is %s; new sessions start on it",
            build_id,
            name,
            how,
        )
        return
    ramp = ""
    if routing.ramping == build_id:
        ramp = f"; it is ramping, with {routing.ramp_percent:g}% of new sessions"
    current = repr(routing.current) if routing.current else "none (unversioned workers)"
    logger.warning(
        "version %s of Worker Deployment %s is not current (current: %s)%s: it serves the "
        "sessions pinned to it, and new sessions start on it once promoted: "
        "keel deploy promote %s %s [--ramp PERCENT]",
        build_id,
        name,
        current,
        ramp,
        name,
        build_id,
    )


def _interceptors(provider: TracerProvider | None) -> list[Interceptor]:
    """The tracing interceptor of temporalio (outermost), then Keel's."""
    if provider is None:
        return [KeelInterceptor()]
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from keel.worker.process.tracing import KeelSpans  # the otel extra: only when tracing

    spans = KeelSpans(provider)
    return [TracingInterceptor(spans.tracer), KeelInterceptor(spans)]
