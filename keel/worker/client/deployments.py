"""Worker Deployments: versions, routing, open sessions per version, promotion.

A versioned worker (``keel worker --deployment NAME --build-id ID``) polls as version ``ID``
of the Worker Deployment ``NAME``. Temporal sends each new session to the deployment's
current version (or, for a share of them, to its ramping version); a session is pinned to the
version it started on and stays there, so an old version's workers must run until its
sessions are done: until it is drained. ``keel deploy status`` and ``keel deploy promote``
are these functions; ``make_first_version_current`` is what a versioned worker does at start.

Temporal's own calls (``DescribeWorkerDeployment``, ``SetWorkerDeploymentCurrentVersion``,
``SetWorkerDeploymentRampingVersion``) and its visibility search attribute
``TemporalWorkerDeploymentVersion`` (``NAME:ID``) are all this uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import temporalio.api.workflowservice.v1 as wsv1
from temporalio.api.deployment.v1 import RoutingConfig, WorkerDeploymentInfo
from temporalio.api.enums.v1 import WorkerDeploymentVersionStatus
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode

from keel.worker.client.errors import RequestRejected

T = TypeVar("T")
SESSION_TYPE = "AgentSession"
# how long a starting worker waits for Temporal to list its version (it does after a poll)
REGISTER_WAIT_S = 30.0
_REGISTER_POLL_S = 0.2
_BUSY_PAUSE_MAX_S = 2.0
# Temporal's answers to a deployment request that a later try may not get: busy, cancelled
# (seen under a loaded dev server: "operation was canceled"), timed out, unreachable.
_ASK_AGAIN = frozenset(
    {
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
    }
)
_STATUS_PREFIX = "WORKER_DEPLOYMENT_VERSION_STATUS_"


@dataclass(frozen=True)
class Routing:
    """Where a deployment sends new sessions.

    Attributes:
        current: the current version's build id; None when there is none (new sessions go
            to unversioned workers).
        ramping: the ramping version's build id, if any.
        ramp_percent: the share of new sessions the ramping version gets.
        claimed: this call made the version current (the deployment had none).
    """

    current: str | None
    ramping: str | None = None
    ramp_percent: float = 0.0
    claimed: bool = False

    @classmethod
    def of(cls, config: RoutingConfig, *, claimed: bool = False) -> Routing:
        """The routing of a deployment, from Temporal's routing config."""
        return cls(
            current=config.current_deployment_version.build_id or None,
            ramping=config.ramping_deployment_version.build_id or None,
            ramp_percent=config.ramping_version_percentage,
            claimed=claimed,
        )


@dataclass(frozen=True)
class VersionStatus:
    """One version of a deployment.

    Attributes:
        build_id: the version's build id.
        state: ``current``, ``ramping``, ``draining`` (not current, still has open
            workflows), ``drained`` (no open workflow left: its workers can go) or
            ``inactive`` (never current nor ramping, and nothing runs on it).
        temporal_status: what Temporal says of it (``current``, ``ramping``, ``draining``,
            ``drained``, ``inactive``); Temporal refreshes drainage only every few minutes.
        open_sessions: open sessions (``AgentSession`` workflows) whose version this is.
        open_workflows: open workflows of any type on it (your own, sessions' too).
        created: when Temporal first saw a worker of it.
    """

    build_id: str
    state: str
    temporal_status: str
    open_sessions: int
    open_workflows: int
    created: datetime | None

    @property
    def drained(self) -> bool:
        """Nothing runs on this version any more: its workers can be retired."""
        return self.state in ("drained", "inactive")


@dataclass(frozen=True)
class DeploymentStatus:
    """A deployment: its routing and its versions, newest first."""

    name: str
    routing: Routing
    versions: Sequence[VersionStatus]


def version_query(version: WorkerDeploymentVersion) -> str:
    """The visibility query of the workflows whose version is ``version``."""
    key = f"{version.deployment_name}:{version.build_id}"
    return f"TemporalWorkerDeploymentVersion={_literal(key)}"


async def describe(client: Client, name: str) -> wsv1.DescribeWorkerDeploymentResponse:
    """Temporal's description of a deployment.

    Raises:
        RequestRejected: no deployment of that name (no versioned worker of it has polled).
    """
    request = wsv1.DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
    try:
        return await _when_not_busy(
            lambda: client.workflow_service.describe_worker_deployment(request)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RequestRejected(
                f"no Worker Deployment {name!r} in namespace {client.namespace!r}: "
                "start a worker with keel worker --deployment NAME --build-id ID",
                kind="DeploymentNotFound",
            ) from err
        raise


async def deployment_status(client: Client, name: str) -> DeploymentStatus:
    """A deployment's routing and its versions with their open sessions, newest first.

    Raises:
        RequestRejected: no deployment of that name.
    """
    info = (await describe(client, name)).worker_deployment_info
    routing = Routing.of(info.routing_config)
    summaries = sorted(
        info.version_summaries, key=lambda s: s.create_time.ToDatetime(), reverse=True
    )

    async def one(summary: WorkerDeploymentInfo.WorkerDeploymentVersionSummary) -> VersionStatus:
        build_id = summary.deployment_version.build_id
        query = version_query(WorkerDeploymentVersion(name, build_id))
        running = f'ExecutionStatus="Running" AND {query}'
        workflows, sessions = await asyncio.gather(
            client.count_workflows(running),
            client.count_workflows(f"WorkflowType={_literal(SESSION_TYPE)} AND {running}"),
        )
        temporal = WorkerDeploymentVersionStatus.Name(summary.status)
        temporal = temporal.removeprefix(_STATUS_PREFIX).lower()
        created = summary.create_time
        return VersionStatus(
            build_id=build_id,
            state=_state(build_id, routing, temporal, workflows.count),
            temporal_status=temporal,
            open_sessions=sessions.count,
            open_workflows=workflows.count,
            created=created.ToDatetime() if created.seconds else None,
        )

    versions = await asyncio.gather(*(one(s) for s in summaries))
    return DeploymentStatus(name=name, routing=routing, versions=versions)


def _state(build_id: str, routing: Routing, temporal: str, open_workflows: int) -> str:
    if build_id == routing.current:
        return "current"
    if build_id == routing.ramping:
        return "ramping"
    if open_workflows:
        return "draining"
    return "inactive" if temporal in ("inactive", "created") else "drained"


async def promote(
    client: Client, name: str, build_id: str, *, ramp_percent: float | None = None
) -> Routing:
    """Make a version current, or ramping with a share of the new sessions.

    Args:
        client: the Temporal client.
        name: the deployment.
        build_id: the version to promote; a worker of it must have polled.
        ramp_percent: None: make it current (the previous current version starts to
            drain); else send it this percentage (0-100) of new sessions.

    Returns:
        The deployment's routing afterwards.

    Raises:
        RequestRejected: no such deployment or version, or Temporal refused the change.
    """
    await describe(client, name)  # a missing deployment in words
    service = client.workflow_service
    try:
        if ramp_percent is None:
            current = wsv1.SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace,
                deployment_name=name,
                build_id=build_id,
                identity=client.identity,
            )
            await _when_not_busy(lambda: service.set_worker_deployment_current_version(current))
        else:
            ramping = wsv1.SetWorkerDeploymentRampingVersionRequest(
                namespace=client.namespace,
                deployment_name=name,
                build_id=build_id,
                percentage=ramp_percent,
                identity=client.identity,
            )
            await _when_not_busy(lambda: service.set_worker_deployment_ramping_version(ramping))
    except RPCError as err:
        if err.status in (
            RPCStatusCode.NOT_FOUND,
            RPCStatusCode.FAILED_PRECONDITION,
            RPCStatusCode.INVALID_ARGUMENT,
            RPCStatusCode.ALREADY_EXISTS,
        ):
            raise RequestRejected(
                f"Temporal refused to promote {build_id!r} of {name!r}: {err.message}",
                kind="PromoteRefused",
            ) from err
        raise
    return Routing.of((await describe(client, name)).worker_deployment_info.routing_config)


async def make_first_version_current(
    client: Client, version: WorkerDeploymentVersion, *, wait_s: float = REGISTER_WAIT_S
) -> Routing:
    """Make ``version`` current when its deployment has no current version; the routing.

    A deployment's first version thus serves new sessions as soon as its first worker polls;
    every later version waits for ``promote``. Temporal lists a version once one of its
    workers has polled: this waits up to ``wait_s`` for that. The change is made with the
    deployment's conflict token, so two first workers racing each other (or an operator's
    promote) cannot both win.

    Raises:
        TimeoutError: Temporal did not list the version within ``wait_s``.
        RPCError: Temporal failed otherwise.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    pause = _REGISTER_POLL_S
    while True:
        try:
            routing = await _claim_once(client, version)
        except RPCError as err:
            # the deployment's own workflow takes few requests at once, and a loaded server
            # cancels or times out some: ask again a bit later
            if err.status not in _ASK_AGAIN:
                raise
            routing = None
            pause = min(pause * 2, _BUSY_PAUSE_MAX_S)
        if routing is not None:
            return routing
        if loop.time() >= deadline:
            raise TimeoutError(
                f"Temporal did not list version {version.build_id!r} of Worker Deployment "
                f"{version.deployment_name!r} within {wait_s:g} s"
            )
        await asyncio.sleep(pause)


async def _claim_once(client: Client, version: WorkerDeploymentVersion) -> Routing | None:
    """One try of ``make_first_version_current``; None while the version is not listed."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            wsv1.DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=version.deployment_name
            )
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = described.worker_deployment_info
    if not any(s.deployment_version.build_id == version.build_id for s in info.version_summaries):
        return None
    routing = Routing.of(info.routing_config)
    if routing.current is not None:
        return routing
    try:
        await client.workflow_service.set_worker_deployment_current_version(
            wsv1.SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace,
                deployment_name=version.deployment_name,
                build_id=version.build_id,
                conflict_token=described.conflict_token,
                identity=client.identity,
            )
        )
    except RPCError as err:  # someone changed the routing first: read it again
        if err.status not in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.ABORTED):
            raise
        return None
    after = await describe(client, version.deployment_name)
    return Routing.of(after.worker_deployment_info.routing_config, claimed=True)


async def _when_not_busy(call: Callable[[], Awaitable[T]], attempts: int = 6) -> T:
    """``call()``, asked again while Temporal says the deployment has too many requests.

    A deployment's changes go through one workflow of Temporal's, which takes few requests
    at once; right after a version registers it can answer RESOURCE_EXHAUSTED for a moment.
    """
    pause = _REGISTER_POLL_S
    for _ in range(attempts - 1):
        try:
            return await call()
        except RPCError as err:
            if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, _BUSY_PAUSE_MAX_S)
    return await call()


def _literal(text: str) -> str:
    """A string literal of Temporal's visibility query language."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
