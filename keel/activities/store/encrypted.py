"""Encryption at rest: AES-256-GCM under named keys, and a blob backend that uses it.

One ``Keyring`` serves the conversation store (``EncryptedBackend``) and the Temporal payload
codec (``keel.worker.encryption``). It encrypts with one key and decrypts with that key or any
older one it was given, so keys can be rotated: new objects use the new key, old ones still
read. Every sealed object names its key by id (the first 8 hex digits of the SHA-256 of the
key), so a reader without that key says which key it lacks instead of returning garbage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keel.activities.store.base import BlobBackend, StoreError

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_CHARS = 8
# No JSON document starts with "K": an object that does not start with this is plaintext
# (written before encryption was turned on).
MAGIC = b"KEEL\x01"


class EncryptionKeyError(Exception):
    """A key is malformed, or a sealed object's key is not among the keys given."""


class StoreEncryptionError(StoreError, EncryptionKeyError):
    """A stored object cannot be decrypted with the keys this process has."""


def key_id(key: bytes) -> str:
    """The name of a key: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:KEY_ID_CHARS]


def parse_key(text: str, where: str) -> bytes:
    """A key from its base64 text.

    Raises:
        EncryptionKeyError: not base64, or not 32 bytes (naming ``where``).
    """
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionKeyError(f"{where}: not valid base64") from None
    if len(key) != KEY_BYTES:
        raise EncryptionKeyError(
            f"{where}: an AES-256 key is {KEY_BYTES} bytes, this one is {len(key)} "
            "(make one with: python3 -c 'import os,base64;"
            "print(base64.b64encode(os.urandom(32)).decode())')"
        )
    return key


@dataclass(frozen=True)
class Keyring:
    """The key that encrypts (if any) and every key that decrypts, by id."""

    encrypt_id: str | None = None
    _ciphers: dict[str, AESGCM] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, encrypt: bytes | None, decrypt: Iterable[bytes] = ()) -> Keyring:
        """A keyring that encrypts with ``encrypt`` and decrypts with it and ``decrypt``."""
        ciphers = {key_id(k): AESGCM(k) for k in decrypt}
        if encrypt is not None:
            ciphers[key_id(encrypt)] = AESGCM(encrypt)
        return cls(None if encrypt is None else key_id(encrypt), ciphers)

    @property
    def active(self) -> bool:
        """Whether anything is encrypted or decrypted at all."""
        return bool(self._ciphers)

    @property
    def key_ids(self) -> list[str]:
        """The ids of every key this keyring decrypts with."""
        return sorted(self._ciphers)

    def seal(self, data: bytes) -> tuple[str, bytes]:
        """``data`` encrypted with the encryption key: its id, and nonce + ciphertext + tag."""
        assert self.encrypt_id is not None, "no encryption key"
        nonce = os.urandom(NONCE_BYTES)
        aad = self.encrypt_id.encode()
        return self.encrypt_id, nonce + self._ciphers[self.encrypt_id].encrypt(nonce, data, aad)

    def open(self, kid: str, sealed: bytes, what: str) -> bytes:
        """Decrypt what ``seal`` made with key ``kid``.

        Raises:
            EncryptionKeyError: no key of that id, or the data fails authentication.
        """
        cipher = self._ciphers.get(kid)
        if cipher is None:
            have = ", ".join(self.key_ids) or "none"
            raise EncryptionKeyError(
                f"{what} is encrypted with key {kid}, which this process does not have "
                f"(keys here: {have}); set KEEL_ENCRYPTION_KEY or KEEL_DECRYPTION_KEYS"
            )
        if len(sealed) < NONCE_BYTES + 16:  # a nonce and a GCM tag at the least
            raise EncryptionKeyError(f"{what} (key {kid}) is too short to be sealed data")
        try:
            return cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], kid.encode())
        except (InvalidTag, ValueError):
            raise EncryptionKeyError(
                f"{what} (key {kid}) fails authentication: it was altered"
            ) from None


class EncryptedBackend:
    """A blob backend whose objects are sealed with a keyring (``MAGIC``, key id, sealed).

    Without an encryption key it writes plaintext; it reads plaintext objects always (those
    written before encryption was on), and sealed ones with the key they name.
    """

    def __init__(self, inner: BlobBackend, keyring: Keyring) -> None:
        """Wrap ``inner``."""
        self.inner = inner
        self.keyring = keyring

    def __getattr__(self, name: str) -> Any:
        """The wrapped backend's other attributes (a local backend's ``root``, say)."""
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes) -> None:
        """Seal (when there is an encryption key) and store."""
        if self.keyring.encrypt_id is not None:
            kid, sealed = self.keyring.seal(data)
            data = MAGIC + kid.encode() + sealed
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        """Read and open.

        Raises:
            KeyError: nothing under the key.
            StoreEncryptionError: sealed with a key not given, or altered.
        """
        data = self.inner.get(key)
        if not data.startswith(MAGIC):
            return data
        start = len(MAGIC)
        kid = data[start : start + KEY_ID_CHARS].decode("ascii", "replace")
        try:
            return self.keyring.open(kid, data[start + KEY_ID_CHARS :], f"stored object {key}")
        except EncryptionKeyError as err:
            raise StoreEncryptionError(str(err)) from None
