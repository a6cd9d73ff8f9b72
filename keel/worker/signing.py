"""Approver keys on the client side: make a key pair, load a private key, sign a decision.

The workflow checks what is signed here (``keel.workflows.signing``). A private key is an Ed25519
key in PKCS#8 PEM, written with mode 0600; its public half is shared as ``ed25519:<base64>``.
A decision or answer is signed for the interrupt as the session shows it (``sign_for``): its
tool, its input and the session's namespace, in the message version the interrupt names.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keel.workflows.contracts import Interrupt
from keel.workflows.signing import (
    PUBLIC_KEY_PREFIX,
    approval_message,
    fingerprint,
    signed_message,
)

# A PEM Ed25519 private key is about 120 bytes; no more than this is read of a key file.
MAX_KEY_FILE_BYTES = 64 * 1024


class ApproverKeyError(ValueError):
    """A private key file cannot be written or read."""


def public_key_text(key: Ed25519PrivateKey) -> str:
    """``ed25519:<base64 of the raw 32-byte public key>``."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PUBLIC_KEY_PREFIX + base64.b64encode(raw).decode()


def generate_key(path: str | os.PathLike[str]) -> str:
    """Write a new private key to ``path`` (mode 0600, never over a file); its public key.

    Raises:
        ApproverKeyError: the file exists or cannot be written.
    """
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ApproverKeyError(f"{path} exists; refusing to overwrite a key") from None
    except OSError as err:
        raise ApproverKeyError(f"cannot write {path}: {err.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return public_key_text(key)


@dataclass(frozen=True)
class ApproverKey:
    """An approver's private key, loaded: signs decisions and answers."""

    key: Ed25519PrivateKey

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ApproverKey:
        """Read a PEM private key written by ``generate_key`` (``keel keygen``).

        Raises:
            ApproverKeyError: missing, unreadable, or not an Ed25519 private key.
        """
        try:
            with Path(path).open("rb") as file:
                data = file.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as err:
            raise ApproverKeyError(f"cannot read approver key {path}: {err.strerror}") from None
        if len(data) > MAX_KEY_FILE_BYTES:
            raise ApproverKeyError(
                f"{path} is not a PEM private key: over {MAX_KEY_FILE_BYTES:,} bytes"
            )
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as err:
            raise ApproverKeyError(f"{path} is not a PEM private key: {err}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ApproverKeyError(f"{path} is not an Ed25519 private key")
        return cls(key)

    @property
    def public_key(self) -> str:
        """``ed25519:<base64>``."""
        return public_key_text(self.key)

    @property
    def fingerprint(self) -> str:
        """The public key's fingerprint, as ``keel show`` prints it."""
        return fingerprint(self.public_key)

    def sign_message(self, message: bytes) -> str:
        """The base64 Ed25519 signature of ``message``."""
        return base64.b64encode(self.key.sign(message)).decode()

    def sign_for(
        self,
        interrupt: Interrupt,
        *,
        namespace: str,
        session_id: str,
        kind: Literal["decide", "respond"],
        what: Any,
        reason: str | None,
        approver: str | None,
    ) -> str:
        """The signature of a decision or answer for ``interrupt`` as the session shows it.

        See ``keel.workflows.signing.approval_message``; ``namespace`` is the client's.
        """
        message = approval_message(
            interrupt,
            namespace=namespace,
            session_id=session_id,
            kind=kind,
            what=what,
            reason=reason,
            approver=approver,
        )
        return self.sign_message(message)

    def sign(
        self,
        session_id: str,
        interrupt_id: str,
        kind: Literal["decide", "respond"],
        what: Any,
        reason: str | None,
        approver: str | None,
    ) -> str:
        """A version-1 signature (``signed_message``): for interrupts opened before version 2.

        A version-2 interrupt refuses it; ``sign_for`` signs what an interrupt asks for.
        """
        return self.sign_message(
            signed_message(session_id, interrupt_id, kind, what, reason, approver)
        )
