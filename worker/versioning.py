"""Worker Versioning: which build a worker is, and how its workflows move to a newer one.

With a deployment name the worker serves its workflow queue as one version of that deployment,
its workflows PINNED; long-running ones continue as new when the target changes. The build id
defaults to the package version plus a digest of the workflow code. Without a name the worker is
unversioned. The procedure: docs/operations.md, 'With Worker Versioning (recommended)'."""

from __future__ import annotations

import asyncio
import hashlib
import time
from functools import cache
from pathlib import Path

from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

import devicepool
from devicepool import workflows

__all__ = [
    "current_build",
    "default_build_id",
    "deployment_config",
    "promote",
    "workflow_code_digest",
]


@cache
def workflow_code_digest() -> str:
    """12 hex digits over every module of `devicepool.workflows` (name and source)."""
    root = Path(workflows.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def default_build_id() -> str:
    """`<version>-<workflow code digest>`: a new build whenever the workflow code changes."""
    return f"{devicepool.__version__}-{workflow_code_digest()}"


def deployment_config(name: str, build_id: str, *, pinned: bool = True) -> WorkerDeploymentConfig:
    """A versioned worker of deployment `name`, build `build_id`; workflows default to PINNED
    (or AUTO_UPGRADE: they follow the current build at their next task)."""
    behavior = VersioningBehavior.PINNED if pinned else VersioningBehavior.AUTO_UPGRADE
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        default_versioning_behavior=behavior,
    )


async def promote(
    client: Client, name: str, build_id: str, *, identity: str = "devicepool", wait: float = 60.0
) -> None:
    """Make `build_id` the current version of deployment `name`: new workflows start on it
    and pinned ones move to it at their next hand-over. The server knows a version only
    once one of its workers polled: until then (at most `wait` seconds) it is tried again."""
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace,
        deployment_name=name,
        build_id=build_id,
        identity=identity,
        ignore_missing_task_queues=True,
    )
    if await current_build(client, name) == build_id:
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(request)
            return
        except RPCError as err:
            unknown = err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
            if not unknown or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.5)


async def current_build(client: Client, name: str) -> str | None:
    """The build id of deployment `name`'s current version (None: none set, or no deployment)."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    version = described.worker_deployment_info.routing_config.current_deployment_version
    return version.build_id or None
