"""Signed approvals (S4): the message an approver signs, and its check.

Pure module: imported by workflow code. A session started with ``approver_keys`` counts a
decision or answer only when it carries an Ed25519 signature, by the key of the approver it
names, over ``signed_message``: the session id, the interrupt id, what is decided (approve or
deny, or the answer's canonical JSON), the reason and the approver's name. So a signature
replayed onto another interrupt or session, or a reason changed on the way, does not verify.

Verification uses ``cryptography`` (OpenSSL's Ed25519), passed through the workflow sandbox
(``keel.worker.process.sandbox``): it is a pure function of the public key, the message and the
signature, so replaying it is deterministic, and it takes tens of microseconds where a
pure-Python Ed25519 takes milliseconds and would be a second, unaudited implementation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PUBLIC_KEY_PREFIX = "ed25519:"
_CONTEXT = "keel-approval-v1"


class BadSignature(ValueError):
    """A signature, or an approver's public key, does not check out."""


def signed_message(
    session_id: str,
    interrupt_id: str,
    kind: Literal["decide", "respond"],
    what: Any,
    reason: str | None,
    approver: str | None,
) -> bytes:
    """The bytes an approver signs: canonical JSON (sorted keys, no spaces, UTF-8).

    Args:
        session_id: the session (workflow id).
        interrupt_id: the interrupt decided or answered.
        kind: ``decide`` or ``respond``.
        what: ``approve`` / ``deny`` for a decision; the answer's value for an answer.
        reason: the decision's reason (None for an answer).
        approver: the approver's name as the decision carries it.
    """
    body = {
        "context": _CONTEXT,
        "session": session_id,
        "interrupt": interrupt_id,
        "kind": kind,
        "value": what,
        "reason": reason,
        "approver": approver,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def public_key_bytes(public_key: str) -> bytes:
    """The raw 32 bytes of ``ed25519:<base64>``.

    Raises:
        BadSignature: not an Ed25519 public key in that form.
    """
    if not public_key.startswith(PUBLIC_KEY_PREFIX):
        raise BadSignature(f"public key must start with {PUBLIC_KEY_PREFIX!r}")
    try:
        raw = base64.b64decode(public_key[len(PUBLIC_KEY_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise BadSignature("public key is not valid base64") from None
    if len(raw) != 32:
        raise BadSignature(f"an Ed25519 public key has 32 bytes, this one {len(raw)}")
    return raw


def fingerprint(public_key: str) -> str:
    """A short name of a public key: ``SHA256:`` and 16 hex digits of its raw bytes' digest."""
    return "SHA256:" + hashlib.sha256(public_key_bytes(public_key)).hexdigest()[:16]


def verify(public_key: str, message: bytes, signature: str | None) -> None:
    """Check a base64 signature over ``message`` by ``public_key``.

    Raises:
        BadSignature: no signature, a malformed one, or one that does not verify.
    """
    if not signature:
        raise BadSignature("it is not signed")
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise BadSignature("its signature is not valid base64") from None
    key = Ed25519PublicKey.from_public_bytes(public_key_bytes(public_key))
    try:
        key.verify(raw, message)
    except InvalidSignature:
        raise BadSignature(
            "its signature does not verify (another key, or signed for another "
            "interrupt, session, decision or reason)"
        ) from None
