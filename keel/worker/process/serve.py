"""``keel worker`` as a long-running service: configured, observable, shut down gracefully.

Order of start: logging, settings checks (exit 2 on a bad one), the metrics runtime, the
health endpoint, tracing, then the connection and the worker. On SIGTERM or Ctrl-C, the
readiness probe turns 503, the worker stops polling, and running model calls and tools get
``KEEL_SHUTDOWN_GRACE_S`` to finish before they are cancelled; whatever is cut off fails as
``WorkerShutdown`` (temporalio), which Temporal retries on another worker at once. Spans still
buffered are flushed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from keel.activities.mcp import McpServerConfig
from keel.worker.client.status_attribute import creating_hint, status_support
from keel.worker.process.assembly import build_worker, freeze_startup_heap, mcp_servers_running
from keel.worker.process.configured import connect_configured
from keel.worker.process.health import HealthServer
from keel.worker.process.stream_server import StreamConfig
from keel.worker.process.telemetry import configure_logging, metrics_runtime
from keel.worker.settings import ConfigError, Settings, WorkerSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from temporalio.client import Client
    from temporalio.worker import Worker

__all__ = ["run_until_signalled", "serve_worker"]

logger = logging.getLogger("keel.worker")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def serve_worker(
    settings: Settings,
    config: WorkerSettings,
    tool_modules: Sequence[str],
    mcp_servers: Sequence[McpServerConfig] = (),
) -> None:
    """Run a worker until SIGTERM or SIGINT, then shut it down gracefully.

    Args:
        settings: where Temporal is and how to reach it; the task queue.
        config: the worker's limits, shutdown grace, ports, tracing and logs.
        tool_modules: tool modules to load.
        mcp_servers: MCP servers whose tools the worker offers, connected before it polls.

    Raises:
        ConfigError: a setting turned out unusable (a port taken, tracing without the
            ``otel`` extra, a stream endpoint address that cannot be listened on).
        UsageError: an invalid connection setting.
        TemporalUnreachable: Temporal does not answer.
        McpServerError: an MCP server did not start, or two sources define one tool.
    """
    configure_logging(config.log_format, config.log_level)
    settings.client_options()  # check TLS files and the like before opening any port
    version = settings.deployment_version()
    # a malformed KEEL_STREAM_LISTEN: exit 2 now, before any port opens (the worker binds it)
    StreamConfig.of(settings.stream_listen, settings.stream_advertise)
    runtime = metrics_runtime(config.metrics_port) if config.metrics_port else None
    state = _State()
    health = (
        HealthServer(config.health_port, state.live, state.ready) if config.health_port else None
    )
    provider = _tracer_provider(config)
    try:
        if health is not None:
            health.start()
        client, address = await connect_configured(settings, runtime=runtime)
        async with mcp_servers_running(mcp_servers) as mcp:
            worker = build_worker(
                client,
                settings.task_queue,
                tool_modules,
                mcp_servers=mcp or (),
                settings=settings,
                tracer_provider=provider,
                graceful_shutdown_timeout=timedelta(seconds=config.shutdown_grace_s),
                **_limits(config),
            )
            freeze_startup_heap()
            state.worker = worker
            logger.info(
                "worker %s on %s, namespace %s, task queue %s%s",
                client.identity,
                address,
                settings.namespace,
                settings.task_queue,
                f", version {version.build_id} of Worker Deployment {version.deployment_name}"
                if version is not None
                else "",
            )
            await _notice_status_attribute(client)
            grace_s = config.shutdown_grace_s

            def drain() -> None:
                state.draining = True
                logger.info("shutting down: up to %g s for running activities", grace_s)

            await run_until_signalled(worker, drain)
        logger.info("worker %s stopped", client.identity)
    finally:
        state.finished = True
        if health is not None:
            health.stop()
        if provider is not None:
            provider.shutdown()


async def _notice_status_attribute(client: Client) -> None:
    """Say at start when the namespace lacks ``KeelStatus``: sessions then run without it."""
    support = await status_support(client)
    if not support.present:
        logger.warning(
            "%s; sessions run without a KeelStatus search attribute (temporal workflow list "
            "--query 'KeelStatus=\"waiting\"' finds none); an operator creates it with: %s",
            support.problem,
            creating_hint(client.namespace),
        )


class _State:
    """What the health endpoint reports."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.draining = False
        self.finished = False

    def live(self) -> bool:
        return not self.finished

    def ready(self) -> bool:
        return self.worker is not None and self.worker.is_running and not self.draining


def _limits(config: WorkerSettings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=config.sticky_timeout_s)
    }
    if config.max_concurrent_activities is not None:
        options["max_concurrent_activities"] = config.max_concurrent_activities
    if config.max_concurrent_workflow_tasks is not None:
        options["max_concurrent_workflow_tasks"] = config.max_concurrent_workflow_tasks
    if config.max_cached_workflows is not None:
        options["max_cached_workflows"] = config.max_cached_workflows
    return options


def _tracer_provider(config: WorkerSettings) -> TracerProvider | None:
    if config.otlp_traces_url is None:
        return None
    try:
        from keel.worker.process.tracing import otlp_exporter, tracer_provider

        exporter = otlp_exporter(config.otlp_traces_url)
    except ImportError as err:
        raise ConfigError(
            f"tracing to {config.otlp_endpoint} needs OpenTelemetry: "
            f"pip install 'keel[otel]' ({err})"
        ) from err
    return tracer_provider(exporter, service_name=config.service_name)


async def run_until_signalled(worker: Worker, on_signal: Callable[[], None] | None = None) -> None:
    """Run a worker until SIGTERM or SIGINT, then shut it down gracefully.

    Args:
        worker: the worker to run.
        on_signal: called when a signal arrives, before the shutdown starts.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(worker.run())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            if on_signal is not None:
                on_signal()
            await worker.shutdown()
        await task
    finally:
        waiter.cancel()
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)
