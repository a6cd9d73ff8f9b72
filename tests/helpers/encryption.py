"""Encryption keys for tests, and the raw bytes Temporal and the store hold."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from temporalio.client import WorkflowHistory

from keel.activities.store import Keyring


def new_key() -> str:
    """A fresh ``KEEL_ENCRYPTION_KEY`` value."""
    return base64.b64encode(os.urandom(32)).decode()


def keyring_of(encrypt: str | None, *older: str) -> Keyring:
    """The keyring that ``KEEL_ENCRYPTION_KEY=encrypt`` and ``KEEL_DECRYPTION_KEYS`` give."""
    return Keyring.of(
        None if encrypt is None else base64.b64decode(encrypt),
        [base64.b64decode(k) for k in older],
    )


def history_payload_data(history: WorkflowHistory) -> bytes:
    """``json_payload_data`` of a history's JSON form."""
    return json_payload_data(history.to_json())


def json_payload_data(text: str) -> bytes:
    """Every string of a JSON history, and each one's base64-decoded bytes where it decodes.

    Payload data is bytes inside the protobuf, base64 in the JSON form: searching this finds
    a plaintext anywhere in the history, in payloads or outside them.
    """

    decoded: list[bytes] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            decoded.append(value.encode())
            try:
                decoded.append(base64.b64decode(value, validate=True))
            except ValueError:
                pass

    walk(json.loads(text))
    return b"\n".join(decoded)


def store_bytes(root: Path) -> bytes:
    """Every file under a store directory, concatenated."""
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
