"""The ``keel`` commands that serve sessions: ``keel worker`` and ``keel dev``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the commands run is imported when they run: `keel --help` stays light
    from keel.worker.settings import Settings


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """``keel worker``: run a worker until SIGTERM or Ctrl-C, then shut down gracefully.

    Without ``--address`` or ``TEMPORAL_ADDRESS``, the ``keel dev`` serving this folder's
    ``KEEL_HOME`` (verified, as every command finds it); else the default address. Flags win
    over their environment variables (see ``keel.worker.settings``); an invalid setting exits
    2 with the reason.
    """
    from keel.worker.cli.run_inputs import UsageError, mcp_servers, tool_modules
    from keel.worker.process.serve import serve_worker
    from keel.worker.server.connection import dev_server
    from keel.worker.settings import FLAG_NAMES, ConfigError, WorkerSettings

    flags = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FLAG_NAMES.items()}
    settings = dataclasses.replace(
        settings,
        address=flags["TEMPORAL_ADDRESS"] or settings.address,
        namespace=flags["TEMPORAL_NAMESPACE"] or settings.namespace,
        task_queue=flags["KEEL_TASK_QUEUE"] or settings.task_queue,
        deployment=flags["KEEL_DEPLOYMENT"] or settings.deployment,
        build_id=flags["KEEL_BUILD_ID"] or settings.build_id,
        tls="true" if args.tls else settings.tls,
        tls_cert=args.tls_cert or settings.tls_cert,
        tls_key=args.tls_key or settings.tls_key,
        tls_ca=args.tls_ca or settings.tls_ca,
        tls_server_name=args.tls_server_name or settings.tls_server_name,
        prices_file=args.prices or settings.prices_file,
    )
    if not settings.address:  # the `keel dev` of this folder, as the other commands find it
        settings = dev_server(settings) or settings
    try:
        config = WorkerSettings.load(flags=flags)
        servers = mcp_servers(args.mcp, settings.environ)
        await serve_worker(settings, config, tool_modules(args.tools), servers)
    except ConfigError as err:
        raise UsageError(str(err)) from err
    return EXIT_OK


async def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    """``keel dev``: embedded dev server with its web UI, a worker and Keel's page, in front.

    Its record, in the user's state directory (``keel.worker.server.dev_record``), says it is
    shared while it runs: the commands run on the same ``KEEL_HOME`` (in this folder) connect
    to it, once they have verified it. ``--no-worker``: no worker of its own (``keel worker``
    in the same folder finds the server and runs the turns).
    """
    from keel.worker.cli.codec import ui_codec
    from keel.worker.cli.run_inputs import UsageError, mcp_servers, tool_modules
    from keel.worker.cli.ui import build_app, ui_source, until_signalled
    from keel.worker.process.assembly import build_worker, freeze_startup_heap, mcp_servers_running
    from keel.worker.process.configured import connect_configured
    from keel.worker.process.serve import run_until_signalled
    from keel.worker.server.devserver import DevServer, free_ports, port_free
    from keel.worker.settings import Settings
    from keel.worker.shell import command
    from keel.worker.ui.serving import UiBindError, ui_running

    if args.no_worker and (args.tools or args.mcp):
        given = "--tools" if args.tools else "--mcp"
        raise UsageError(
            f"{given} configures keel dev's worker, and --no-worker runs none: give it to the "
            "`keel worker` that runs the turns"
        )
    web_ui = args.temporal_ui_port
    if web_ui is None and args.port + 1000 <= 65535 and port_free(args.port + 1000):
        web_ui = args.port + 1000  # Temporal's own default; else a free port
    if web_ui is None and args.ui_codec:
        web_ui = free_ports(1)[0]  # the codec server answers this origin only: fixed now
    async with (
        ui_codec(settings, web_ui, args.ui_codec) as codec_at,
        DevServer(
            settings.home,
            port=args.port,
            ui=True,
            ui_port=web_ui,
            namespace=settings.namespace,
            shared=True,
            cli=settings.temporal_cli,
            state_home=settings.state_home,
            adopt_database=args.adopt_database,
            ui_codec_endpoint=codec_at,
        ) as server,
    ):
        client, _ = await connect_configured(
            Settings(
                server.address,
                settings.namespace,
                encryption_key=settings.encryption_key,
                decryption_keys=settings.decryption_keys,
            )
        )
        async with contextlib.AsyncExitStack() as stack:
            worker = None
            if not args.no_worker:
                servers = mcp_servers(args.mcp, settings.environ)
                mcp = await stack.enter_async_context(mcp_servers_running(servers))
                worker = build_worker(
                    client,
                    settings.task_queue,
                    tool_modules(args.tools),
                    mcp_servers=mcp or (),
                    settings=settings,
                )
            page = build_app(settings, ui_source(settings, client), None)
            try:
                url = await stack.enter_async_context(
                    ui_running(page.app, flags.UI_HOST, args.ui_port)
                )
                page_at = f", Keel's approvals page at {page.link(url)}"
            except UiBindError as err:  # the page is a convenience: dev runs without it
                print(f"keel: no approvals page: {err} (try --ui-port)", file=sys.stderr)
                page_at = ""
            freeze_startup_heap()
            decoding = " (decoding through a codec server)" if codec_at else ""
            ready = f"Temporal at {server.address}, web UI at {server.ui_url}{decoding}{page_at}"
            print(f"{ready}; Ctrl-C stops", flush=True)
            if settings.encryption_key and not codec_at:
                print(
                    "keel: Temporal's web UI shows the sessions' payloads encrypted; "
                    "keel dev --ui-codec or keel codec-server decodes them there "
                    "(docs/security.md)",
                    file=sys.stderr,
                )
            print(
                "keel commands run in this folder use it (and its sessions' store); from "
                f"another folder, set {command(f'KEEL_HOME={server.data_dir}')}",
                flush=True,
            )
            if worker is None:
                print(
                    "no worker runs here (--no-worker): sessions' turns wait for one; start "
                    "`keel worker --tools ...` in this folder, which finds this server",
                    flush=True,
                )
                await until_signalled()  # nothing to shut down first
            else:
                await run_until_signalled(worker)
    return EXIT_OK


# ``keel worker``'s flags that override an environment variable: (flag, metavar, help).
_WORKER_SETTINGS = (
    ("--address", "HOST:PORT", "Temporal frontend (TEMPORAL_ADDRESS)"),
    ("--namespace", "NS", "namespace (TEMPORAL_NAMESPACE, default: default)"),
    (
        "--deployment",
        "NAME",
        "Worker Deployment of a versioned worker, with --build-id (KEEL_DEPLOYMENT)",
    ),
    ("--build-id", "ID", "this worker's version in it, e.g. the image tag (KEEL_BUILD_ID)"),
    ("--tls-cert", "PEM", "client certificate for mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH)"),
    ("--tls-key", "PEM", "its private key (TEMPORAL_TLS_CLIENT_KEY_PATH)"),
    ("--tls-ca", "PEM", "CA of the server (TEMPORAL_TLS_SERVER_CA_CERT_PATH)"),
    ("--tls-server-name", "NAME", "name on the server certificate (TEMPORAL_TLS_SERVER_NAME)"),
    ("--max-concurrent-activities", "N", "KEEL_MAX_CONCURRENT_ACTIVITIES (default 100)"),
    ("--max-concurrent-workflow-tasks", "N", "KEEL_MAX_CONCURRENT_WORKFLOW_TASKS"),
    ("--max-cached-workflows", "N", "KEEL_MAX_CACHED_WORKFLOWS (default 1000)"),
    ("--shutdown-grace", "SECONDS", "KEEL_SHUTDOWN_GRACE_S: time to finish after SIGTERM"),
    ("--health-port", "PORT", "serve /healthz and /readyz (KEEL_HEALTH_PORT)"),
    ("--metrics-port", "PORT", "serve Prometheus /metrics (KEEL_METRICS_PORT)"),
    ("--otlp-endpoint", "URL", "export traces by OTLP/HTTP (KEEL_OTLP_ENDPOINT)"),
    ("--log-format", "text|json", "KEEL_LOG_FORMAT (default text)"),
    ("--log-level", "LEVEL", "KEEL_LOG_LEVEL: DEBUG, INFO, WARNING (default), ERROR"),
    (
        "--prices",
        "FILE.toml",
        "the [prices] table of this file prices the fleet's models (KEEL_PRICES)",
    ),
)


def add_parser(sub: flags.Subparsers) -> None:
    """``keel worker`` and ``keel dev``, on the ``keel`` parser's subparsers."""
    worker = sub.add_parser(
        "worker",
        help="run a worker for an existing Temporal",
        description="Run a worker until SIGTERM or Ctrl-C. Each flag overrides the "
        "environment variable named in its help; see docs/deployment.md.",
    )
    worker.add_argument("--tools", help=flags.TOOLS_HELP)
    flags.mcp_flag(worker)
    worker.add_argument("--task-queue", help="task queue (default: KEEL_TASK_QUEUE or keel)")
    for flag, meta, text in _WORKER_SETTINGS:
        worker.add_argument(flag, metavar=meta, help=text)
    worker.add_argument(
        "--tls", action="store_true", help="use TLS with the system's roots (TEMPORAL_TLS=true)"
    )
    worker.set_defaults(handler=cmd_worker)

    dev = sub.add_parser("dev", help="embedded Temporal dev server plus a worker")
    dev.add_argument("--tools", help=flags.TOOLS_HELP)
    flags.mcp_flag(dev)
    dev.add_argument("--port", type=flags.port, default=7233, help="Temporal's port (default 7233)")
    dev.add_argument(
        "--ui-port",
        type=flags.port,
        default=flags.UI_PORT,
        help=f"port of Keel's web page on 127.0.0.1 (default {flags.UI_PORT}; see docs/ui.md)",
    )
    dev.add_argument(
        "--temporal-ui-port",
        type=flags.port,
        metavar="PORT",
        help="port of Temporal's web UI (default: --port + 1000, 8233, when free, else a free one)",
    )
    dev.add_argument(
        "--ui-codec",
        action="store_true",
        help="with KEEL_ENCRYPTION_KEY: Temporal's web UI decodes payloads, through a codec "
        "server on loopback whose endpoint every local user can read; see docs/security.md",
    )
    dev.add_argument(
        "--no-worker",
        action="store_true",
        help="serve Temporal (and the pages) only, no worker: run `keel worker` in this "
        "folder for the turns (it finds this server)",
    )
    dev.add_argument(
        "--adopt-database",
        action="store_true",
        help="start on a temporal.db Keel did not make here (copied, or from an older Keel) "
        "and accept it from now on; see docs/security.md",
    )
    dev.set_defaults(handler=cmd_dev)
