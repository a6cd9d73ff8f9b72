"""``keel codec-server``: Temporal's remote codec protocol, for the Web UI and ``temporal``.

With it, the Web UI and the ``temporal`` CLI show encrypted sessions in the clear to whoever
holds the token.

``POST /decode`` and ``POST /encode`` take and return ``{"payloads": [...]}`` (Temporal's
protobuf JSON of ``Payloads``), through ``worker.encryption.EncryptionCodec``. Every request
needs ``Authorization: Bearer <KEEL_CODEC_TOKEN>``; the UI's origin gets CORS headers (its
preflight carries no credentials, so ``OPTIONS`` is answered without the token).

Starlette (with uvicorn): both come with the ``mcp`` package Keel already depends on, the app
is a few routes, and the CORS middleware is the framework's own, not hand-written headers.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payloads

from activities.store.encrypted import EncryptionKeyError, Keyring
from worker.encryption import EncryptionCodec

logger = logging.getLogger("keel.codec")

DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")


def codec_app(keyring: Keyring, token: str, origins: Sequence[str] = DEFAULT_ORIGINS) -> Starlette:
    """The codec server's ASGI app.

    Args:
        keyring: the keys to encode and decode with.
        token: the bearer token every request must carry.
        origins: browser origins allowed to call it (the Temporal Web UI's).
    """
    codec = EncryptionCodec(keyring)
    expected = f"Bearer {token}".encode()

    async def handle(request: Request) -> Response:
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return JSONResponse({"message": "missing or wrong bearer token"}, status_code=401)
        try:
            payloads = json_format.Parse(await request.body(), Payloads())
        except (json_format.ParseError, DecodeError, UnicodeDecodeError) as err:
            return JSONResponse({"message": f"not a Payloads JSON: {err}"}, status_code=400)
        try:
            if request.url.path.endswith("/encode"):
                done = await codec.encode(payloads.payloads)
            else:
                done = await codec.decode(payloads.payloads)
        except EncryptionKeyError as err:
            return JSONResponse({"message": str(err)}, status_code=400)
        body = json_format.MessageToJson(Payloads(payloads=done))
        return Response(body, media_type="application/json")

    return Starlette(
        routes=[
            Route("/encode", handle, methods=["POST"]),
            Route("/decode", handle, methods=["POST"]),
        ],
        middleware=[
            Middleware(
                CORSMiddleware,
                allow_origins=list(origins),
                allow_methods=["POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "X-Namespace"],
                allow_credentials=True,
            )
        ],
    )


async def serve_codec(
    keyring: Keyring, token: str, host: str, port: int, origins: Sequence[str]
) -> None:
    """Serve the codec until cancelled (Ctrl-C)."""
    import uvicorn

    config = uvicorn.Config(
        codec_app(keyring, token, origins), host=host, port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    logger.info("codec server on http://%s:%s (keys %s)", host, port, keyring.key_ids)
    print(
        f"keel codec server on http://{host}:{port}; keys {', '.join(keyring.key_ids)}", flush=True
    )
    await server.serve()
