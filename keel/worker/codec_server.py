"""``keel codec-server``: Temporal's remote codec protocol, for the Web UI and ``temporal``.

With it, the Web UI and the ``temporal`` CLI show encrypted sessions in the clear to whoever
holds the token.

``POST /decode`` and ``POST /encode`` take and return ``{"payloads": [...]}`` (Temporal's
protobuf JSON of ``Payloads``), through ``keel.worker.encryption.EncryptionCodec``. Every request
needs ``Authorization: Bearer <KEEL_CODEC_TOKEN>``; the UI's origin gets CORS headers (its
preflight carries no credentials, so ``OPTIONS`` is answered without the token).

Whatever an authenticated caller sends, the answer is short: a body over ``MAX_BODY_BYTES``
is refused (413) without being read whole, and anything the codec cannot take (not Payloads
JSON, bad base64, a ciphertext too short or altered, a key it lacks) is 400 with the reason,
never a traceback. Decryption goes through ``open_payload`` here, which raises on every
failure, whatever ``EncryptionCodec.decode`` does with a payload it cannot open.

Starlette (with uvicorn): both come with the ``mcp`` package Keel already depends on, the app
is a few routes, and the CORS middleware is the framework's own, not hand-written headers.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payload, Payloads

from keel.activities.store.encrypted import NONCE_BYTES, EncryptionKeyError, Keyring
from keel.worker.encryption import ENCODING, KEY_ID, EncryptionCodec

logger = logging.getLogger("keel.codec")

DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
# The largest request body read (a history page's payloads); a larger one is refused (413).
MAX_BODY_BYTES = 4 * 1024 * 1024
# AES-GCM's tag: sealed data is at least a nonce and a tag long.
_TAG_BYTES = 16


class BadRequest(Exception):
    """A request the codec cannot serve: its HTTP status and a short reason."""

    def __init__(self, status: int, reason: str) -> None:
        """``status`` (400, 413) and the reason the answer gives."""
        super().__init__(reason)
        self.status = status


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, refused (413) past ``limit`` bytes without reading any further.

    A ``Content-Length`` over the limit is refused before a byte is read; a body without one
    (chunked) is read until it passes the limit.

    Raises:
        BadRequest: 413 over the limit, 400 for a ``Content-Length`` that is not a number.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise BadRequest(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise BadRequest(413, f"the body is over the limit of {limit:,} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"the body is over the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_payloads(body: bytes) -> Payloads:
    """The request's ``{"payloads": [...]}``.

    Raises:
        BadRequest: 400: not UTF-8, not JSON, not Payloads (bad base64, unknown fields), or
            nested too deeply.
    """
    try:
        return json_format.Parse(body, Payloads())
    except (json_format.ParseError, DecodeError, UnicodeDecodeError, ValueError) as err:
        raise BadRequest(400, f"not a Payloads JSON: {_first_line(err)}") from None
    except RecursionError:
        raise BadRequest(400, "not a Payloads JSON: nested too deeply") from None


def open_payload(keyring: Keyring, payload: Payload, index: int) -> Payload:
    """One payload decrypted, or as it is when it is not encrypted.

    Every way an encrypted payload can fail to open is a ``BadRequest`` (400): a key this
    server lacks, data shorter than a nonce and a tag, data that fails authentication, a
    plaintext that is not a payload.
    """
    if payload.metadata.get("encoding") != ENCODING:
        return payload
    kid = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
    what = f"payload {index}"
    if len(payload.data) < NONCE_BYTES + _TAG_BYTES:
        raise BadRequest(
            400,
            f"{what} (key {kid}) is {len(payload.data)} bytes, too short to be encrypted "
            f"(a {NONCE_BYTES}-byte nonce and a {_TAG_BYTES}-byte tag at the least)",
        )
    try:
        plain = keyring.open(kid, payload.data, what)
    except EncryptionKeyError as err:
        raise BadRequest(400, _first_line(err)) from None
    except (InvalidTag, ValueError):
        raise BadRequest(400, f"{what} (key {kid}) fails authentication: it was altered") from None
    inner = Payload()
    try:
        inner.ParseFromString(plain)
    except (DecodeError, ValueError):
        raise BadRequest(400, f"{what} (key {kid}) does not hold a payload once opened") from None
    return inner


def _first_line(err: BaseException) -> str:
    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return line if len(line) <= 300 else line[:299] + "…"


def codec_app(keyring: Keyring, token: str, origins: Sequence[str] = DEFAULT_ORIGINS) -> Starlette:
    """The codec server's ASGI app.

    Every bad request is answered 400 (413 for a body over ``MAX_BODY_BYTES``) with
    ``{"message": <a short reason>}``, never a traceback.

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
            payloads = parse_payloads(await read_body(request))
            if request.url.path.endswith("/encode"):
                done = await codec.encode(payloads.payloads)
            else:
                done = [open_payload(keyring, p, i) for i, p in enumerate(payloads.payloads)]
        except BadRequest as err:
            logger.info("codec %s refused: %s %s", request.url.path, err.status, err)
            return JSONResponse({"message": str(err)}, status_code=err.status)
        body = json_format.MessageToJson(Payloads(payloads=done))
        return Response(body, media_type="application/json")

    async def failure(request: Request, err: Exception) -> Response:
        logger.error("codec %s failed", request.url.path, exc_info=err)
        return JSONResponse({"message": "the codec server failed; its log says why"}, 500)

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
        exception_handlers={Exception: failure},
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
