"""The S3 backend, through boto3: one bucket and key prefix shared by many workers."""

from __future__ import annotations

import threading
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

_clients: dict[str, Any] = {}
_lock = threading.Lock()


def _client() -> Any:
    """One S3 client per process; boto3's own retries are off (Temporal retries)."""
    with _lock:
        if "s3" not in _clients:
            _clients["s3"] = boto3.client(
                "s3", config=Config(retries={"total_max_attempts": 1, "mode": "standard"})
            )
        return _clients["s3"]


def reset_client() -> None:
    """Forget the cached client (tests that change the AWS environment call this)."""
    with _lock:
        _clients.clear()


class S3Backend:
    """Objects under ``s3://bucket/prefix/``; the standard AWS configuration chain applies."""

    def __init__(self, bucket: str, prefix: str = "") -> None:
        """Name the bucket and the key prefix."""
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        """Upload an object (same key, same bytes: idempotent)."""
        _client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get(self, key: str) -> bytes:
        """Download an object.

        Raises:
            KeyError: no such key.
        """
        try:
            response = _client().get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise KeyError(key) from None
            raise
        body: bytes = response["Body"].read()
        return body
