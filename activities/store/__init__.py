"""Conversation storage: content-addressed messages and prefix segments, one backend per file.

``open_store("dir:/path")`` (or a bare path) gives the local-directory store, the embedded
default; ``open_store("s3://bucket/prefix")`` the S3 store for many workers.
"""

from __future__ import annotations

from activities.store.base import (
    BlobBackend,
    ConversationStore,
    StoreCorrupt,
    StoreError,
    StoreMissing,
    message_digest,
)
from activities.store.local import LocalBackend


def open_store(spec: str) -> ConversationStore:
    """A conversation store for a spec: ``s3://bucket[/prefix]``, ``dir:PATH`` or a path.

    Raises:
        ValueError: the spec names no bucket.
    """
    if spec.startswith("s3://"):
        from activities.store.s3 import S3Backend  # boto3 only where S3 is used

        bucket, _, prefix = spec.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"store spec {spec!r} names no bucket: use s3://bucket/prefix")
        return ConversationStore(S3Backend(bucket, prefix), name=spec)
    path = spec.removeprefix("dir:")
    return ConversationStore(LocalBackend(path), name=spec)


__all__ = [
    "BlobBackend",
    "ConversationStore",
    "StoreCorrupt",
    "StoreError",
    "StoreMissing",
    "message_digest",
    "open_store",
]
