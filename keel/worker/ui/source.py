"""Where the web page gets its ``KeelClient``, and who it signs decisions as.

The page starts even when Temporal does not answer: every request asks ``KeelSource`` for
the client, which connects on first use (again at most every ``RECONNECT_EVERY_S`` after a
failure) and otherwise says why it cannot, for the page's banner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.service import RPCError, RPCStatusCode

from keel.worker.client.keel_client import KeelClient
from keel.worker.process.configured import TemporalUnreachable
from keel.worker.signing import ApproverKey
from keel.workflows.contracts import SessionConfig

RECONNECT_EVERY_S = 2.0


class TemporalDown(Exception):
    """Temporal does not answer; the message says where and why, for a person."""


def unreachable(err: BaseException) -> TemporalDown | None:
    """The ``TemporalDown`` that a failed call means, or None when it means something else."""
    if isinstance(err, TemporalDown):
        return err
    if isinstance(err, TemporalUnreachable):
        return TemporalDown(str(err))
    if isinstance(err, RPCError) and err.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    ):
        return TemporalDown(f"Temporal does not answer: {err.message}")
    return None


class KeelSource:
    """The app's ``KeelClient``: given, or connected on first use and kept."""

    def __init__(
        self,
        keel: KeelClient | None = None,
        *,
        connect: Callable[[], Awaitable[KeelClient]] | None = None,
        where: str = "Temporal",
    ) -> None:
        """Give a connected client, or a coroutine function that connects one.

        Args:
            keel: a ready client.
            connect: makes the client; raises ``TemporalUnreachable`` when it cannot.
            where: the address, for messages.
        """
        if keel is None and connect is None:
            raise ValueError("KeelSource needs a client or a way to connect one")
        self._keel = keel
        self._connect = connect
        self.where = where
        self._lock = asyncio.Lock()
        self._failed_at: float | None = None
        self._failure = ""

    async def get(self) -> KeelClient:
        """The client.

        Raises:
            TemporalDown: not connected, and connecting failed (now or a moment ago).
        """
        if self._keel is not None:
            return self._keel
        assert self._connect is not None
        async with self._lock:
            if self._keel is not None:
                return self._keel
            now = asyncio.get_running_loop().time()
            if self._failed_at is not None and now - self._failed_at < RECONNECT_EVERY_S:
                raise TemporalDown(self._failure)
            try:
                self._keel = await self._connect()
            except TemporalUnreachable as err:
                self._failed_at, self._failure = now, str(err)
                raise TemporalDown(str(err)) from err
            return self._keel


@dataclass(frozen=True)
class Signer:
    """The approver key the page signs decisions with (``keel ui --key FILE``)."""

    key: ApproverKey

    @property
    def fingerprint(self) -> str:
        """The key's fingerprint, as ``keel show`` prints it."""
        return self.key.fingerprint

    def approver_in(self, config: SessionConfig) -> str | None:
        """The approver of a session whose public key is this key, if any."""
        mine = self.key.public_key
        return next((name for name, key in config.approver_keys.items() if key == mine), None)


def approver_for(
    config: SessionConfig, signer: Signer | None, name: str | None, default: str | None
) -> str | None:
    """Who a decision on a session is sent as.

    With a key that is one of the session's approver keys, its approver (the only name the
    signature verifies for); else the name the person gave, else ``KEEL_UI_APPROVER``.
    """
    if signer is not None and (signed := signer.approver_in(config)) is not None:
        return signed
    return name or default
