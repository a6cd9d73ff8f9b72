"""Signed approvals (S4): the message an approver signs, and its check.

Pure module: imported by workflow code. A session started with ``approver_keys`` counts a
decision or answer only when it carries an Ed25519 signature, by the key of the approver it
names, over the interrupt's message (``approval_message``). Since ``SIGNING_PATCH`` that is
version 2 (``keel-approval-v2``): the namespace, the session id, the interrupt id, the tool's
name, the interrupt's name and a digest of the tool input as shown (``input_digest``), what is
decided (approve or deny with its standing tests, or the answer), the reason and the
approver's name. So a signature made for what one server showed does not approve another
input, tool, interrupt, session or namespace. An interrupt opened before the patch (a
replayed history, a run that started before it) keeps version 1 (``keel-approval-v1``),
without the namespace, tool and input; the interrupt says which (``Interrupt.signing``), and
a version-1 signature never verifies for a version-2 interrupt.

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
from typing import TYPE_CHECKING, Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

if TYPE_CHECKING:
    from keel.workflows.contracts import Interrupt

PUBLIC_KEY_PREFIX = "ed25519:"
_CONTEXT = "keel-approval-v1"
_CONTEXT_V2 = "keel-approval-v2"
# Interrupts opened under this patch are signed with version 2 (``approval_message``).
SIGNING_PATCH = "keel-signing-v2"
SIGNING_V1 = 1
SIGNING_V2 = 2


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
    body = {  # version 1: sessions' interrupts opened before SIGNING_PATCH
        "context": _CONTEXT,
        "session": session_id,
        "interrupt": interrupt_id,
        "kind": kind,
        "value": what,
        "reason": reason,
        "approver": approver,
    }
    return canonical_json(body)


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys, no spaces, non-ASCII as UTF-8 (a lone surrogate passes as is)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def input_digest(tool_input: Any) -> str:
    """``sha256:`` and the hex SHA-256 of a tool input's ``canonical_json``."""
    return "sha256:" + hashlib.sha256(canonical_json(tool_input)).hexdigest()


def approval_message(
    interrupt: Interrupt,
    *,
    namespace: str,
    session_id: str,
    kind: Literal["decide", "respond"],
    what: Any,
    reason: str | None,
    approver: str | None,
) -> bytes:
    """The bytes an approver signs for ``interrupt``, in the version the interrupt asks for.

    Version 2, as canonical JSON: ``context`` (``keel-approval-v2``), ``namespace``,
    ``session``, ``interrupt`` (its id), ``kind``, ``tool`` (the tool use's name), ``name``
    (the interrupt's: the tool's, or the question's), ``input`` (``input_digest`` of the tool
    use's input), ``value``, ``reason`` and ``approver``. Version 1: ``signed_message``.

    Args:
        interrupt: the interrupt decided or answered, as the session shows it.
        namespace: the Temporal namespace the session runs in.
        session_id: the session (workflow id); or an ancestor's, for a sub-agent's interrupt.
        kind: ``decide`` or ``respond``.
        what: for a decision ``keel.workflows.standing.signed_value``; the answer's value.
        reason: the decision's reason (None for an answer).
        approver: the approver's name as the decision carries it.
    """
    if interrupt.signing < SIGNING_V2:
        return signed_message(session_id, interrupt.id, kind, what, reason, approver)
    body = {
        "context": _CONTEXT_V2,
        "namespace": namespace,
        "session": session_id,
        "interrupt": interrupt.id,
        "kind": kind,
        "tool": interrupt.tool_use.name,
        "name": interrupt.name,
        "input": input_digest(interrupt.tool_use.input),
        "value": what,
        "reason": reason,
        "approver": approver,
    }
    return canonical_json(body)


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
            "interrupt, input, tool, session, namespace, decision or reason)"
        ) from None
