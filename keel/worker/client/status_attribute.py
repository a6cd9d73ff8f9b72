"""Whether the namespace has ``KeelStatus``, so that the sessions a client starts keep one.

A session upserts ``KeelStatus`` only when its start carried it
(``keel.workflows.status_attribute``): upserting a search attribute the namespace lacks would
fail its workflow tasks. So before starting a session, the client asks the server once
(``OperatorService.ListSearchAttributes``) and, when the namespace has it, starts the session
with ``KeelStatus=running``. A server that does not answer (no permission, say) counts as
lacking it: sessions then run without a status, as they always did.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from datetime import timedelta

import temporalio.api.enums.v1 as enums
import temporalio.api.operatorservice.v1 as osv1
from temporalio.client import Client
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError

from keel.workflows.status_attribute import KEEL_STATUS, KEEL_STATUS_TYPE, starting_attributes

logger = logging.getLogger(__name__)

_LIST_TIMEOUT = timedelta(seconds=5)
# A namespace found without it is asked again after this long (an operator may create it
# meanwhile); one found with it keeps it for the client's life.
RECHECK_ABSENT_S = 60.0


@dataclass(frozen=True)
class StatusSupport:
    """What a namespace says about ``KeelStatus``.

    Attributes:
        present: the namespace has it, as a Keyword.
        problem: why it is not usable, in words, when it is not (for the worker's notice).
    """

    present: bool
    problem: str | None = None


_known: weakref.WeakKeyDictionary[Client, tuple[StatusSupport, float]] = weakref.WeakKeyDictionary()


async def status_support(client: Client) -> StatusSupport:
    """Ask the server whether the client's namespace has ``KeelStatus`` as a Keyword."""
    request = osv1.ListSearchAttributesRequest(namespace=client.namespace)
    try:
        response = await client.operator_service.list_search_attributes(
            request, timeout=_LIST_TIMEOUT
        )
    except RPCError as err:
        return StatusSupport(False, f"cannot list the search attributes of the namespace: {err}")
    found = response.custom_attributes.get(KEEL_STATUS.name)
    if found is None:
        return StatusSupport(False, f"namespace {client.namespace!r} has no {KEEL_STATUS.name}")
    if found != enums.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD:
        kind = enums.IndexedValueType.Name(found).removeprefix("INDEXED_VALUE_TYPE_").title()
        return StatusSupport(
            False, f"{KEEL_STATUS.name} is a {kind} search attribute, not a {KEEL_STATUS_TYPE}"
        )
    return StatusSupport(True)


async def start_attributes(client: Client) -> TypedSearchAttributes | None:
    """The search attributes to start a session with: ``KeelStatus=running``, or None.

    Cached per client: a namespace found with it is not asked again; one found without it
    is asked again after ``RECHECK_ABSENT_S``.
    """
    cached = _known.get(client)
    now = time.monotonic()
    if cached is not None and (cached[0].present or now - cached[1] < RECHECK_ABSENT_S):
        support = cached[0]
    else:
        support = await status_support(client)
        _known[client] = (support, now)
        if not support.present:
            logger.debug("sessions start without KeelStatus: %s", support.problem)
    return starting_attributes() if support.present else None


def creating_hint(namespace: str) -> str:
    """The operator's command that creates ``KeelStatus`` on a namespace."""
    return (
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {KEEL_STATUS.name} --type {KEEL_STATUS_TYPE}"
    )


async def register_status_attribute(client: Client) -> bool:
    """Add ``KeelStatus`` to the client's namespace when it lacks it (a dev server's).

    ``temporal server start-dev --search-attribute`` registers it only in a database it
    creates; a database made before needs it added. True when the namespace has it now.
    """
    support = await status_support(client)
    if support.present:
        return True
    request = osv1.AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={
            KEEL_STATUS.name: enums.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        },
    )
    try:
        await client.operator_service.add_search_attributes(request, timeout=_LIST_TIMEOUT)
    except RPCError as err:
        logger.warning("could not add %s to the dev server: %s", KEEL_STATUS.name, err)
        return False
    return True
