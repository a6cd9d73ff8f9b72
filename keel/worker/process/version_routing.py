"""A versioned worker says, once Temporal lists its version, whether it is current.

``KeelPlugin.run_worker`` runs each worker inside ``telling_version``: the deployment's first
version becomes current by itself; a later one logs that it is not current and waits for
``keel deploy promote`` (``keel.worker.client.deployments``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.worker import Worker

from keel.worker.background import beside
from keel.worker.client.deployments import make_first_version_current

logger = logging.getLogger("keel.worker")


@contextlib.asynccontextmanager
async def telling_version(worker: Worker) -> AsyncIterator[None]:
    """While the block runs, tell whether a versioned worker's version is current."""
    deployment = worker.config(active_config=True).get("deployment_config")
    if deployment is None or not deployment.use_worker_versioning:
        yield
        return
    async with beside(_tell_version(worker.client, deployment.version)):
        yield


async def _tell_version(client: Client, version: WorkerDeploymentVersion) -> None:
    """Make the deployment's first version current; log whether this version is."""
    name, build_id = version.deployment_name, version.build_id
    try:
        routing = await make_first_version_current(client, version)
    except (RPCError, TimeoutError) as err:
        logger.warning(
            "version %s of Worker Deployment %s: routing unknown: %s", build_id, name, err
        )
        return
    if routing.current == build_id:
        how = (
            "made current: the deployment had no current version" if routing.claimed else "current"
        )
        logger.info(
            "version %s of Worker Deployment %s is %s; new sessions start on it",
            build_id,
            name,
            how,
        )
        return
    ramp = ""
    if routing.ramping == build_id:
        ramp = f"; it is ramping, with {routing.ramp_percent:g}% of new sessions"
    current = repr(routing.current) if routing.current else "none (unversioned workers)"
    logger.warning(
        "version %s of Worker Deployment %s is not current (current: %s)%s: it serves the "
        "sessions pinned to it, and new sessions start on it once promoted: "
        "keel deploy promote %s %s [--ramp PERCENT]",
        build_id,
        name,
        current,
        ramp,
        name,
        build_id,
    )
