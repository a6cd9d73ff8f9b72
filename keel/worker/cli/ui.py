"""``keel ui``: the web page for approvals (``keel.worker.ui``), and its part in ``keel dev``."""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from starlette.applications import Starlette
    from temporalio.client import Client

    from keel.worker.client.keel_client import KeelClient
    from keel.worker.settings import Settings
    from keel.worker.ui.source import KeelSource

TOKEN_ENV = "KEEL_UI_TOKEN"
APPROVER_ENV = "KEEL_UI_APPROVER"
KEY_ENV = "KEEL_APPROVER_KEY"


def _keel_of(client: Client, settings: Settings) -> KeelClient:
    from keel.activities.store import open_store
    from keel.worker.cli.session_access import QUERY_TIMEOUT_S
    from keel.worker.client.keel_client import KeelClient

    return KeelClient(
        client,
        settings.task_queue,
        open_store(settings.store, settings.keyring()),
        query_timeout_s=QUERY_TIMEOUT_S,
    )


@dataclass(frozen=True)
class Page:
    """The page's app, and what to print with its address.

    Attributes:
        app: the Starlette app.
        guard: how it is guarded, for the line that gives its address.
        login: ``?token=...`` to print after the address once, when this process made up the
            token (a page that signs, without ``KEEL_UI_TOKEN``); else empty.
    """

    app: Starlette
    guard: str
    login: str = ""

    def link(self, url: str) -> str:
        """The address to print: with the generated token, when there is one."""
        return f"{url}/{self.login}" if self.login else url


def build_app(settings: Settings, source: KeelSource, key_path: str | None) -> Page:
    """The app with this process's token, approver and key; and how it is guarded.

    A page that holds a signing key always needs a token, loopback included: without
    ``KEEL_UI_TOKEN``, a random one is made up for this process and printed once, in the
    page's address (as Jupyter does). Else any local process could read the page for its
    CSRF token, then post a decision the page signs.

    Raises:
        ApproverKeyError: the key file cannot be read.
    """
    import secrets

    from keel.worker.signing import ApproverKey
    from keel.worker.ui.app import create_app
    from keel.worker.ui.source import Signer

    token = settings.ui_token
    path = key_path or settings.ui_key
    signer = Signer(ApproverKey.load(path)) if path else None
    login = ""
    if signer is not None and not token:
        token = secrets.token_urlsafe(32)
        login = f"?token={token}"
    approver = settings.ui_approver
    app = create_app(source, token=token, signer=signer, approver=approver)
    if login:
        guard = "it signs, so it needs the token made up for this run: open this link once"
    elif token:
        guard = f"open it once with ?token=${TOKEN_ENV}"
    else:
        guard = f"no {TOKEN_ENV}: this machine only (loopback)"
    if signer is not None:
        guard += f"; signs decisions with key {signer.fingerprint}"
    return Page(app, guard, login)


def ui_source(settings: Settings, client: Client | None = None) -> KeelSource:
    """The page's client: the given one, or connected on first use.

    To ``TEMPORAL_ADDRESS``, else to the ``keel dev`` serving this folder's ``KEEL_HOME``,
    else to the default address.
    """
    from keel.worker.process.configured import connect_configured
    from keel.worker.server.connection import dev_server
    from keel.worker.ui.source import KeelSource

    if client is not None:
        return KeelSource(_keel_of(client, settings), where=settings.address or "Temporal")
    if not settings.address:
        settings = dev_server(settings) or settings

    async def connect() -> KeelClient:
        connected, _ = await connect_configured(settings)
        return _keel_of(connected, settings)

    return KeelSource(connect=connect, where=settings.address or "127.0.0.1:7233")


async def cmd_ui(args: argparse.Namespace, settings: Settings) -> int:
    """``keel ui``: serve the web page until SIGTERM or Ctrl-C.

    It starts even when Temporal does not answer yet (the page shows a banner and retries);
    a bad connection setting or a non-loopback ``--host`` without ``KEEL_UI_TOKEN`` exits 2.
    """
    from keel.worker.ui.serving import check_bind, ui_running
    from keel.worker.ui.source import TemporalDown

    check_bind(args.host, settings.ui_token)
    source = ui_source(settings)
    page = build_app(settings, source, args.key)
    try:
        await source.get()
    except TemporalDown as err:  # unreachable now: the page says so, and retries
        print(f"keel: {err}; the page shows this until Temporal answers", file=sys.stderr)
    async with ui_running(page.app, args.host, args.port) as url:
        print(f"Keel UI at {page.link(url)} ({page.guard}); Ctrl-C stops", flush=True)
        await until_signalled()
    return EXIT_OK


async def until_signalled() -> None:
    """Wait for SIGTERM or SIGINT."""
    import asyncio

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def add_parser(sub: flags.Subparsers) -> None:
    """``keel ui``, on the ``keel`` parser's subparsers."""
    ui = sub.add_parser(
        "ui",
        help="serve the web page for approvals: sessions, live progress, approve/deny/answer",
        description="Serve Keel's web page for the Temporal of TEMPORAL_ADDRESS (same settings "
        "as every command). With KEEL_UI_TOKEN set, every request needs it (Bearer, or "
        "?token= once); without it, only loopback addresses are allowed, and a page that "
        "signs (--key) makes up a token and prints its link. See docs/ui.md.",
    )
    ui.add_argument(
        "--host",
        default=flags.UI_HOST,
        help=f"address to listen on (default {flags.UI_HOST}; others need KEEL_UI_TOKEN)",
    )
    ui.add_argument(
        "--port", type=int, default=flags.UI_PORT, help=f"port (default {flags.UI_PORT})"
    )
    flags.key_flag(ui)
    ui.set_defaults(handler=cmd_ui)
