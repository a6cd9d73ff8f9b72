"""``keel codec-server``: decode encrypted payloads for the Temporal Web UI and CLI."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from keel.worker.cli import flags
from keel.worker.cli.console import EXIT_OK

if TYPE_CHECKING:  # what the command runs is imported when it runs: `keel --help` stays light
    from keel.worker.settings import Settings


async def cmd_codec_server(args: argparse.Namespace, settings: Settings) -> int:
    """Serve ``/encode`` and ``/decode`` with this environment's keys until Ctrl-C.

    Raises:
        UsageError: no keys (``KEEL_ENCRYPTION_KEY``) or no ``KEEL_CODEC_TOKEN``.
        ConfigError: a malformed key.
    """
    from keel.worker.cli.run_inputs import UsageError
    from keel.worker.codec_server import DEFAULT_ORIGINS, serve_codec

    keyring = settings.keyring()
    if keyring is None:
        raise UsageError("keel codec-server needs KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS)")
    token = settings.codec_token or ""
    if not token:
        raise UsageError(
            "keel codec-server needs KEEL_CODEC_TOKEN: the bearer token callers must send "
            "(temporal ... --codec-auth 'Bearer <token>')"
        )
    origins = args.cors_origin or list(DEFAULT_ORIGINS)
    await serve_codec(keyring, token, args.host, args.port, origins)
    return EXIT_OK


def add_parser(sub: flags.Subparsers) -> None:
    """``keel codec-server``, on the ``keel`` parser's subparsers."""
    codec = sub.add_parser(
        "codec-server",
        help="decode encrypted payloads for the Temporal Web UI and CLI",
        description="Serve Temporal's codec protocol (POST /encode, /decode) with "
        "KEEL_ENCRYPTION_KEY and KEEL_DECRYPTION_KEYS; callers send "
        "Authorization: Bearer $KEEL_CODEC_TOKEN.",
    )
    codec.add_argument("--port", type=int, required=True, help="port to listen on")
    codec.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    codec.add_argument(
        "--cors-origin",
        action="append",
        metavar="URL",
        help="a browser origin allowed to call it, repeatable (default: the dev server's UI, "
        "http://localhost:8233)",
    )
    codec.set_defaults(handler=cmd_codec_server)
