"""Conversation storage: content-addressed messages and prefix segments, one backend per file.

``open_store("dir:/path")`` (or a bare path) gives the local-directory store, the embedded
default; ``open_store("s3://bucket/prefix")`` the S3 store for many workers.
"""

from __future__ import annotations

from keel.activities.store.base import (
    BlobBackend,
    ConversationStore,
    StoreCorrupt,
    StoreError,
    StoreMissing,
    message_digest,
)
from keel.activities.store.encrypted import (
    EncryptedBackend,
    EncryptionKeyError,
    Keyring,
    StoreEncryptionError,
)
from keel.activities.store.local import LocalBackend


def open_store(spec: str, keyring: Keyring | None = None) -> ConversationStore:
    """A conversation store for a spec: ``s3://bucket[/prefix]``, ``dir:PATH`` or a path.

    Args:
        spec: where.
        keyring: encrypts what is written and decrypts what is read (``KEEL_ENCRYPTION_KEY``);
            without one, objects are written as they are, and an encrypted one fails to read,
            naming its key.

    Raises:
        ValueError: the spec names no bucket.
    """
    if spec.startswith("s3://"):
        from keel.activities.store.s3 import S3Backend  # boto3 only where S3 is used

        bucket, _, prefix = spec.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"store spec {spec!r} names no bucket: use s3://bucket/prefix")
        backend: BlobBackend = S3Backend(bucket, prefix)
    else:
        backend = LocalBackend(spec.removeprefix("dir:"))
    return ConversationStore(EncryptedBackend(backend, keyring or Keyring()), name=spec)


__all__ = [
    "BlobBackend",
    "ConversationStore",
    "EncryptedBackend",
    "EncryptionKeyError",
    "Keyring",
    "StoreEncryptionError",
    "StoreCorrupt",
    "StoreError",
    "StoreMissing",
    "message_digest",
    "open_store",
]
