"""Encryption of what Keel sends to Temporal: a ``PayloadCodec`` over a ``Keyring``.

With ``KEEL_ENCRYPTION_KEY`` set, clients and workers encode every payload (workflow input,
activity inputs and results, updates, signals, queries and their answers, memo, failure
details) as ``binary/encrypted``: the whole serialized payload, sealed with AES-256-GCM, and
the key's id in the metadata (``encryption-key-id``). Payloads that are not encrypted (older
history, a client without a key) decode as they are.

An encrypted payload that cannot be opened (a key this process lacks, or data that fails
authentication: anyone can send a signal that claims to be encrypted) is not an error of the
codec, which would fail the whole workflow task, every time, for good: it is passed on as it
is, marked with why (``DECRYPT_ERROR``), and converting it fails, naming the key id
(``keel.worker.payloads``). So a signal carrying one is dropped and logged, an update or a query
is refused, and the session goes on; a payload of the session's own history (its start
input, an activity's result) still fails the workflow task, clearly, until a worker with the
right key takes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from keel.activities.store.encrypted import EncryptionKeyError, Keyring

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
# Set on an encrypted payload that this process could not open: why.
DECRYPT_ERROR = "keel-decrypt-error"
logger = logging.getLogger("keel.encryption")


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

        One that cannot be opened is returned encrypted, marked with why (``DECRYPT_ERROR``).
        """
        return [self._decrypt_or_mark(p) for p in payloads]

    def _decrypt_or_mark(self, payload: Payload) -> Payload:
        try:
            return self.decrypt(payload)
        except EncryptionKeyError as err:
            logger.warning("payload left encrypted: %s", err)
            marked = Payload()
            marked.CopyFrom(payload)
            marked.metadata[DECRYPT_ERROR] = str(err).encode()
            return marked

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
        try:
            inner.ParseFromString(self.keyring.open(kid, payload.data, "a Temporal payload"))
        except DecodeError:
            raise EncryptionKeyError(
                f"a Temporal payload (key {kid}) does not hold a payload once opened"
            ) from None
        return inner


def missing_key(payload: Payload) -> EncryptionKeyError:
    """The error for an encrypted payload that could not be opened, naming its key."""
    why = payload.metadata.get(DECRYPT_ERROR)
    if why is not None:
        return EncryptionKeyError(why.decode("utf-8", "replace"))
    kid = payload.metadata.get(KEY_ID, b"").decode("ascii", "replace")
    return EncryptionKeyError(
        f"a Temporal payload is encrypted with key {kid}, and this process has no key: "
        "set KEEL_ENCRYPTION_KEY (or KEEL_DECRYPTION_KEYS) as the workers have it"
    )
