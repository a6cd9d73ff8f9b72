"""A client of the configured Temporal: ``TEMPORAL_ADDRESS`` with its TLS, key and namespace.

What a worker process (``keel worker``) and every command connect through once they know the
address; where the address comes from when none is configured (a ``keel dev``, an embedded
server) is ``keel.worker.server``'s concern, above this one.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import temporalio.api.workflowservice.v1 as wsv1
from temporalio.client import Client
from temporalio.runtime import Runtime as TemporalRuntime
from temporalio.service import RPCError, RPCStatusCode

from keel.worker.process.assembly import connect
from keel.worker.settings import DEFAULT_ADDRESS, ConfigError, Settings

logger = logging.getLogger(__name__)

_DESCRIBE_TIMEOUT = timedelta(seconds=10)


class TemporalUnreachable(RuntimeError):
    """No Temporal server answers at the configured address."""


async def connect_configured(
    settings: Settings, *, runtime: TemporalRuntime | None = None
) -> tuple[Client, str]:
    """Connect to ``TEMPORAL_ADDRESS`` (or the default address when unset).

    TLS, the API key and gRPC metadata come from the settings (``Settings.client_options``).

    Args:
        settings: process settings.
        runtime: the temporalio runtime for the client (SDK metrics); default the global one.

    Raises:
        ConfigError: an invalid connection setting, or a namespace the server does not have.
        TemporalUnreachable: naming the address and what went wrong.
    """
    address = settings.address or DEFAULT_ADDRESS
    options = settings.client_options()
    try:
        client = await connect(
            address,
            settings.namespace,
            tls=options.tls,
            api_key=options.api_key,
            rpc_metadata=options.rpc_metadata,
            runtime=runtime,
            keyring=settings.keyring(),
        )
    except RuntimeError as err:
        hint = (
            "is the server there? (TEMPORAL_ADDRESS)"
            if settings.address
            else "set TEMPORAL_ADDRESS, or run `keel dev`"
        )
        raise TemporalUnreachable(
            f"cannot reach Temporal at {address}: {_reason(err)}; {hint}"
        ) from err
    await check_namespace(client, address)
    return client, address


async def check_namespace(client: Client, address: str) -> None:
    """Make sure the server has the client's namespace.

    Without this, a mistyped ``TEMPORAL_NAMESPACE`` shows much later, as a session that is
    not found. A server that does not let the client describe its namespace is trusted.

    Raises:
        ConfigError: the server has no such namespace.
    """
    request = wsv1.DescribeNamespaceRequest(namespace=client.namespace)
    try:
        await client.workflow_service.describe_namespace(request, timeout=_DESCRIBE_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ConfigError(
                f"TEMPORAL_NAMESPACE: Temporal at {address} has no namespace {client.namespace!r}"
            ) from err
        logger.info("cannot describe namespace %s: %s", client.namespace, err)


def _reason(err: RuntimeError) -> str:
    """The OS's words in temporalio's connection error (which quotes Rust's), else all of it."""
    said = re.findall(r'message: "([^"]+)"', str(err))
    return said[-1] if said else str(err)
