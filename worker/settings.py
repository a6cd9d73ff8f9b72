"""Process settings, read from the environment when asked (never at import time)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_TASK_QUEUE = "keel"
DEFAULT_NAMESPACE = "default"
DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_HOME = ".keel"


@dataclass(frozen=True)
class Settings:
    """Where Temporal is and which task queue Keel uses.

    Attributes:
        address: ``TEMPORAL_ADDRESS``; None when unset (the CLI may then embed a dev server).
        namespace: ``TEMPORAL_NAMESPACE``, default ``default``.
        task_queue: ``KEEL_TASK_QUEUE``, default ``keel``.
        model: ``KEEL_MODEL``, the model spec used when a command names none.
        home: ``KEEL_HOME``, where the embedded dev server keeps its database (``.keel``).
        store_spec: ``KEEL_STORE``, where conversations are stored: ``s3://bucket/prefix``
            for many workers, or a directory; default ``<home>/store``.
    """

    address: str | None
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    model: str | None = None
    home: str = DEFAULT_HOME
    store_spec: str | None = None

    @property
    def store(self) -> str:
        """The conversation store spec in force."""
        return self.store_spec or f"{self.home}/store"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default: ``os.environ``)."""
        env = os.environ if env is None else env
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or None,
            namespace=env.get("TEMPORAL_NAMESPACE") or DEFAULT_NAMESPACE,
            task_queue=env.get("KEEL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            model=env.get("KEEL_MODEL") or None,
            home=env.get("KEEL_HOME") or DEFAULT_HOME,
            store_spec=env.get("KEEL_STORE") or None,
        )
