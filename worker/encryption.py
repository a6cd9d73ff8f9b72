"""Encryption of what Keel sends to Temporal: a ``PayloadCodec`` over a ``Keyring``.

With ``KEEL_ENCRYPTION_KEY`` set, clients and workers encode every payload (workflow input,
activity inputs and results, updates, signals, queries and their answers, memo, failure
details) as ``binary/encrypted``: the whole serialized payload, sealed with AES-256-GCM, and
the key's id in the metadata (``encryption-key-id``). Payloads that are not encrypted (older
history, a client without a key) decode as they are; an encrypted one whose key is missing
fails, naming the key id.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from activities.store.encrypted import EncryptionKeyError, Keyring

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"


class EncryptionCodec(PayloadCodec):
    """Seal payloads with the keyring's encryption key; open them with any of its keys."""

    def __init__(self, keyring: Keyring) -> None:
        """Use ``keyring`` (see ``Settings.keyring``)."""
        self.keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload (as it is, when there is no encryption key)."""
        if self.keyring.encrypt_id is None:
            return list(payloads)
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt each encrypted payload; others are returned as they are.

        Raises:
            EncryptionKeyError: a payload's key is not among this process's keys.
        """
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        """One payload sealed."""
        kid, sealed = self.keyring.seal(payload.SerializeToString())
        return Payload(metadata={"encoding": ENCODING, KEY_ID: kid.encode()}, data=sealed)

    def decrypt(self, payload: Payload) -> Payload:
        """One payload opened (or returned as it is, when it is not encrypted)."""
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        kid = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
        inner = Payload()
        inner.ParseFromString(self.keyring.open(kid, payload.data, "a Temporal payload"))
        return inner


def missing_key(payload: Payload) -> EncryptionKeyError:
    """The error for an encrypted payload met by a process with no keys at all."""
    kid = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
    return EncryptionKeyError(
        f"a Temporal payload is encrypted with key {kid}, and this process has no key: "
        "set KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS) as the workers have it"
    )
