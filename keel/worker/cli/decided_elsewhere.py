"""A question on the terminal that another terminal may answer first.

While ``keel run`` asks a person to approve a tool call, ``keel approve`` (or ``deny``,
``respond``) may decide it from another terminal. The question is then withdrawn, and the
command goes on following its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from keel.worker.client.keel_client import KeelClient

logger = logging.getLogger(__name__)

T = TypeVar("T")

POLL_S = 0.5
"""How often the turn is asked whether the interrupt still waits."""


class DecidedElsewhere:
    """The interrupt was decided (or the turn went on) before the person answered here."""


async def unless_decided(
    keel: KeelClient,
    session: str,
    turn_id: int,
    interrupt_id: str,
    question: Coroutine[Any, Any, T],
) -> T | DecidedElsewhere:
    """The person's answer to ``question``; ``DecidedElsewhere`` once the interrupt is decided.

    The turn is asked every ``POLL_S`` whether ``interrupt_id`` still waits; when it does not,
    the question is withdrawn and a line says so.
    """
    asking = asyncio.ensure_future(question)
    try:
        while not asking.done():
            await asyncio.wait({asking}, timeout=POLL_S)
            if asking.done() or await _still_waits(keel, session, turn_id, interrupt_id):
                continue
            asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asking
            print(f"\nkeel: {interrupt_id} was decided in another terminal", flush=True)
            return DecidedElsewhere()
        return asking.result()
    finally:
        if not asking.done():
            asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asking


async def _still_waits(keel: KeelClient, session: str, turn_id: int, interrupt_id: str) -> bool:
    """Whether the turn still waits on ``interrupt_id`` (True when it cannot be told)."""
    try:
        record = await keel.turn(session, turn_id)
    except Exception as err:  # a query that fails now says nothing of the decision
        logger.debug("cannot tell whether %s still waits: %s", interrupt_id, err)
        return True
    return record.status == "awaiting_human" and any(
        i.id == interrupt_id for i in record.interrupts
    )
