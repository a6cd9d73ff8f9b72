"""``keel codec-server``: Temporal's remote codec protocol, for the Web UI and ``temporal``.

With it, the Web UI and the ``temporal`` CLI show encrypted sessions in the clear to whoever
holds its endpoint URL or its token.

``POST /decode`` and ``POST /encode`` take and return ``{"payloads": [...]}`` (Temporal's
protobuf JSON of ``Payloads``), through ``keel.worker.encryption.EncryptionCodec``. A caller
proves it may, one of two ways:

- **The endpoint URL** ``http://127.0.0.1:PORT/<secret>`` (``keel.worker.codec_endpoint``):
  ``POST /<secret>/decode`` needs no header. This is what the Temporal Web UI can use: it
  sends no ``Authorization`` header to a codec endpoint configured in the browser or by
  ``temporal server start-dev --ui-codec-endpoint``.
- **A bearer token** (``KEEL_CODEC_TOKEN``, when set): ``POST /decode`` with
  ``Authorization: Bearer <token>``, as before.

Whichever it is, a request from a browser page must come from an allowed origin (the UI's):
a request whose ``Origin`` is another is refused (403) before its body is read, and so is
one whose ``Host`` is not a loopback name while the server listens on loopback (a DNS
rebinding page). The UI's origins get CORS headers (the preflight carries no credentials, so
``OPTIONS`` is answered without them). A wrong secret is a 404, as any unknown path; neither
the secret nor a path is ever logged.

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
import ipaddress
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


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def loopback(host: str) -> bool:
    """Whether ``host`` (an address to listen on, or a request's host name) is loopback.

    ``localhost`` or a loopback IP address (``127.0.0.1``, ``::1``), never a name that
    merely starts like one (``127.evil.example``).
    """
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, its port dropped: ``[::1]:8888`` is ``::1``."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def codec_app(
    keyring: Keyring,
    token: str | None,
    origins: Sequence[str] = DEFAULT_ORIGINS,
    *,
    secret: str | None = None,
    loopback_only: bool = True,
) -> Starlette:
    """The codec server's ASGI app.

    Every bad request is answered 400 (413 for a body over ``MAX_BODY_BYTES``) with
    ``{"message": <a short reason>}``, never a traceback.

    Args:
        keyring: the keys to encode and decode with.
        token: the bearer token ``/encode`` and ``/decode`` take; None: they take none.
        origins: browser origins allowed to call it (the Temporal Web UI's).
        secret: the secret of the endpoint URL: ``/<secret>/decode`` needs no header.
        loopback_only: it listens on loopback: a request must name a loopback ``Host``.
    """
    codec = EncryptionCodec(keyring)
    expected = f"Bearer {token}".encode() if token else None
    allowed = frozenset(origins)

    def refusal(request: Request, in_path: str | None) -> Response | None:
        """Why the request is refused (403, 404, 401), or None when it may be served."""
        origin = request.headers.get("origin")
        if origin is not None and origin not in allowed:
            return JSONResponse(
                {
                    "message": f"origin {origin[:100]} may not call this codec server "
                    "(keel codec-server --ui URL allows one)"
                },
                status_code=403,
            )
        if loopback_only and not loopback(host_name(request.headers.get("host", ""))):
            return JSONResponse(
                {"message": "this codec server answers only requests to a loopback address"},
                status_code=403,
            )
        if in_path is not None:
            if secret is None or not hmac.compare_digest(in_path.encode(), secret.encode()):
                return JSONResponse({"message": "not found"}, status_code=404)
            return None
        given = request.headers.get("authorization", "").encode()
        if expected is None or not hmac.compare_digest(given, expected):
            return JSONResponse({"message": "missing or wrong bearer token"}, status_code=401)
        return None

    async def handle(request: Request) -> Response:
        operation = request.path_params["operation"]
        if operation not in ("encode", "decode"):
            return JSONResponse({"message": "not found"}, status_code=404)
        refused = refusal(request, request.path_params.get("secret"))
        if refused is not None:
            return refused
        try:
            payloads = parse_payloads(await read_body(request))
            if operation == "encode":
                done = await codec.encode(payloads.payloads)
            else:
                done = [open_payload(keyring, p, i) for i, p in enumerate(payloads.payloads)]
        except BadRequest as err:
            logger.info("codec %s refused: %s %s", operation, err.status, err)
            return JSONResponse({"message": str(err)}, status_code=err.status)
        body = json_format.MessageToJson(Payloads(payloads=done))
        return Response(body, media_type="application/json")

    async def failure(request: Request, err: Exception) -> Response:
        logger.error("codec %s failed", request.path_params.get("operation"), exc_info=err)
        return JSONResponse({"message": "the codec server failed; its log says why"}, 500)

    operation = "{operation:str}"
    return Starlette(
        routes=[
            Route(f"/{{secret:str}}/{operation}", handle, methods=["POST"]),
            Route(f"/{operation}", handle, methods=["POST"]),
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
    keyring: Keyring,
    token: str | None,
    host: str,
    port: int,
    origins: Sequence[str],
    secret: str | None = None,
) -> None:
    """Serve the codec until cancelled (Ctrl-C)."""
    import uvicorn

    app = codec_app(keyring, token, origins, secret=secret, loopback_only=loopback(host))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    logger.info("codec server on http://%s:%s (keys %s)", host, port, keyring.key_ids)
    await server.serve()
