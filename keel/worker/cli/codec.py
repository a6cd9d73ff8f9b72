"""``keel codec-server``: decode encrypted payloads for the Temporal Web UI and CLI."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from keel.worker.settings import Settings


async def cmd_codec_server(args: argparse.Namespace, settings: Settings) -> int:
    """Serve ``/encode`` and ``/decode`` with this environment's keys until Ctrl-C.

    The endpoint URL (``http://HOST:PORT/<secret>``, the secret kept for this ``KEEL_HOME``)
    is printed for the Temporal Web UI and ``temporal --codec-endpoint``; with
    ``KEEL_CODEC_TOKEN``, ``/decode`` with ``Authorization: Bearer <token>`` works as well.

    Raises:
        UsageError: no keys (``KEEL_ENCRYPTION_KEY``), or a ``--ui`` that is not an origin.
        ConfigError: a malformed key.
    """
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.codec_endpoint import codec_record_path, endpoint_secret
    from keel.worker.codec_server import DEFAULT_ORIGINS, loopback, serve_codec

    keyring = settings.keyring()
    if keyring is None:
        raise UsageError("keel codec-server needs KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS)")
    origins = [_origin(url) for url in args.ui] if args.ui else list(DEFAULT_ORIGINS)
    secret, kept = endpoint_secret(settings.home, settings.state_home, renew=args.new_secret)
    where = f"[{args.host}]" if ":" in args.host else args.host
    endpoint = f"http://{where}:{args.port}/{secret}"
    kept_at = f"kept in {codec_record_path(settings.home, settings.state_home)}"
    print(
        f"keel codec server on http://{where}:{args.port}; keys {', '.join(keyring.key_ids)}\n"
        f"codec endpoint (a secret: whoever has it can decrypt; {kept_at if kept else 'not kept'})"
        f":\n  {endpoint}\n"
        f"Temporal Web UI ({', '.join(origins)}): paste it in its Codec Server dialog (top "
        "right), or start the dev server with --ui-codec-endpoint set to it\n"
        f"temporal CLI: --codec-endpoint {endpoint}",
        flush=True,
    )
    if settings.codec_token:
        print("KEEL_CODEC_TOKEN is set: /decode takes it as a bearer token too", flush=True)
    if not loopback(args.host):
        print(
            f"keel: warning: listening on {args.host}, not loopback: the endpoint's secret "
            "crosses the network in the clear unless a TLS proxy is in front",
            flush=True,
        )
    await serve_codec(keyring, settings.codec_token, args.host, args.port, origins, secret)
    return EXIT_OK


@contextlib.asynccontextmanager
async def ui_codec(
    settings: Settings, ui_port: int | None, wanted: bool
) -> AsyncIterator[str | None]:
    """``keel dev --ui-codec``: a codec server for the dev server's web UI while the block runs.

    It listens on a free loopback port and answers only the UI's origin (``ui_port``), at an
    endpoint whose secret is made for this run (it goes on the ``temporal`` command line and
    into the UI's settings, so it is not the one ``keel codec-server`` keeps). Yields the
    endpoint URL, for ``--ui-codec-endpoint``; None when not ``wanted`` or without a UI.

    Raises:
        UsageError: no ``KEEL_ENCRYPTION_KEY`` (nothing to decode with).
    """
    import secrets

    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.codec_endpoint import SECRET_BYTES
    from keel.worker.codec_server import codec_app
    from keel.worker.ui.serving import ui_running

    if not wanted:
        yield None
        return
    keyring = settings.keyring()
    if keyring is None:
        raise UsageError(
            "keel dev --ui-codec needs KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS): without "
            "keys there is nothing to decode"
        )
    if ui_port is None:
        yield None
        return
    secret = secrets.token_urlsafe(SECRET_BYTES)
    origins = [f"http://127.0.0.1:{ui_port}", f"http://localhost:{ui_port}"]
    app = codec_app(keyring, settings.codec_token, origins, secret=secret)
    async with ui_running(app, "127.0.0.1", 0) as url:
        yield f"{url}/{secret}"


def _origin(url: str) -> str:
    """``--ui URL`` as the origin a browser sends: ``scheme://host[:port]``, nothing more.

    Raises:
        UsageError: not an http(s) URL with a host, or one with a path, query or user.
    """
    from urllib.parse import urlsplit

    from keel.worker.cli.run_inputs import UsageError

    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as err:
        raise UsageError(f"--ui {url!r} is not a URL: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--ui {url!r} is not an http(s) URL, e.g. http://localhost:8233")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise UsageError(
            f"--ui {url!r} is not an origin: give the Web UI's scheme, host and port only, "
            "e.g. http://localhost:8233"
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"


def add_parser(sub: flags.Subparsers) -> None:
    """``keel codec-server``, on the ``keel`` parser's subparsers."""
    codec = sub.add_parser(
        "codec-server",
        help="decode encrypted payloads for the Temporal Web UI and CLI",
        description="Serve Temporal's codec protocol (POST /encode, /decode) with "
        "KEEL_ENCRYPTION_KEY and KEEL_DECRYPTION_KEYS at an endpoint URL with a secret in it "
        "(printed; kept for this KEEL_HOME), for the Temporal Web UI and temporal "
        "--codec-endpoint; with KEEL_CODEC_TOKEN, also for "
        "Authorization: Bearer $KEEL_CODEC_TOKEN.",
    )
    codec.add_argument("--port", type=int, required=True, help="port to listen on")
    codec.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    codec.add_argument(
        "--ui",
        "--cors-origin",
        dest="ui",
        action="append",
        metavar="URL",
        help="the Temporal Web UI's origin, the only page allowed to call it, repeatable "
        "(default: the dev server's UI, http://localhost:8233 and http://127.0.0.1:8233)",
    )
    codec.add_argument(
        "--new-secret",
        action="store_true",
        help="replace the endpoint's secret: the URL given out before stops working",
    )
    codec.set_defaults(handler=cmd_codec_server)
