"""`devicepool upgrade`: promote a build of the worker deployment, and show who runs where.

With `--build-id` the build becomes current and every running pool of either kind is woken, so it
continues as new on it now; either way the current build and the pools not on it yet are listed. The
procedure: docs/operations.md, 'With Worker Versioning (recommended)'."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from devicepool.api.kinds import KINDS
from devicepool.client._cli_support import OutputOpt, run
from devicepool.client._kind_sides import side_of
from devicepool.client.errors import DevicePoolError
from devicepool.client.render import print_data, resolve_output

DEFAULT_DEPLOYMENT = "devicepool"
# Every kind's pools: both run on the versioned worker and hand over at a wake.
_KIND_OF_TYPE = {kind.workflow_type: kind for kind in KINDS.values()}
RUNNING_POOLS = (
    "("
    + " OR ".join(f'WorkflowType="{workflow_type}"' for workflow_type in _KIND_OF_TYPE)
    + ') AND ExecutionStatus="Running"'
)


def upgrade(
    build_id: Annotated[
        str | None,
        typer.Option("--build-id", help="make this build the current version (default: only show)"),
    ] = None,
    deployment_name: Annotated[
        str, typer.Option("--deployment-name", help="the Temporal worker deployment")
    ] = DEFAULT_DEPLOYMENT,
    wake: Annotated[
        bool,
        typer.Option("--wake/--no-wake", help="signal every running pool to move now"),
    ] = True,
    output: OutputOpt = None,
) -> None:
    """Promote a worker build (Worker Versioning) and show which pools still run an older one."""

    async def body() -> None:
        from temporalio.service import RPCError

        from devicepool.connect import connect
        from devicepool.worker.versioning import current_build, promote

        client = await connect()
        if build_id:
            cannot = f"cannot make build {build_id!r} current in deployment {deployment_name!r}"
            unseen = await _never_polled(client, deployment_name, build_id)
            if unseen is not None:
                raise DevicePoolError(
                    f"{cannot}: {unseen}; a just-deployed build's workers may not have polled "
                    "yet: run it again once they are up"
                )
            try:
                await promote(client, deployment_name, build_id, identity="devicepool upgrade")
            except RPCError as err:
                raise DevicePoolError(
                    f"{cannot}: {err.message} (are its workers running?)"
                ) from None
            if wake:
                await _wake_pools(client)
        current = await current_build(client, deployment_name)
        behind = await _pools_not_on(client, deployment_name, current) if current else []
        data = {"deployment": deployment_name, "currentBuild": current, "poolsBehind": behind}
        out = resolve_output(output)
        if out.value != "table":
            print_data(data, out)
            return
        typer.echo(f"deployment {deployment_name}: current build {current or '(none)'}")
        if not behind:
            typer.echo("every running pool is on it")
        for pool in behind:
            typer.echo(f"  {pool['pool']}  still on {pool['build'] or '(unversioned)'}")

    run(body)


async def _never_polled(client: Any, deployment: str, build_id: str) -> str | None:
    """Why `build_id` cannot be promoted now, when no worker of it has polled `deployment`
    (the server lists a version once it recorded its first poll); None when one did, or
    polls the task queue now (listed moments later), or when the deployment cannot be read
    (`promote` then says what the server says).

    `promote` waits up to a minute for a version the server does not know yet: a worker that
    promotes its own build at start-up polls moments later. Here the operator promotes a
    build whose workers already run (docs/operations.md), so one nobody polls with is a typo
    or a build not up yet: said at once, not after that minute."""
    from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            return None
        if await _polling(client, deployment, build_id):
            return None
        return "no versioned worker has polled that deployment (--deployment-name)"
    builds = [
        summary.deployment_version.build_id
        for summary in described.worker_deployment_info.version_summaries
    ]
    if build_id in builds or not all(builds):  # a server that names versions otherwise
        return None
    if await _polling(client, deployment, build_id):
        return None
    listed = (
        f"its builds: {', '.join(sorted(builds))}"
        if builds
        else "the deployment lists no build yet"
    )
    return f"no worker of that build has polled it ({listed})"


async def _polling(client: Any, deployment: str, build_id: str) -> bool:
    """Whether a worker of `build_id` polls the pools' task queue (its polls are seen before
    the deployment lists its version); False when that cannot be read."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.service import RPCError

    from devicepool.api.names import TASK_QUEUE

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=TASK_QUEUE),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        answer = await client.workflow_service.describe_task_queue(request)
    except RPCError:  # an older server, no permission: the refusal stands
        return False
    return any(
        poller.deployment_options.deployment_name == deployment
        and poller.deployment_options.build_id == build_id
        for poller in answer.pollers
    )


async def _wake_pools(client: Any) -> None:
    from devicepool.api.names import SIGNAL_WAKE

    ids = [wf.id async for wf in client.list_workflows(RUNNING_POOLS)]
    for start in range(0, len(ids), 50):
        await asyncio.gather(
            *(client.get_workflow_handle(i).signal(SIGNAL_WAKE) for i in ids[start : start + 50]),
            return_exceptions=True,  # a pool that ended meanwhile
        )


async def _pools_not_on(client: Any, deployment: str, build: str) -> list[dict[str, str]]:
    """Running pools whose run is not on `build` (visibility lags a few seconds), named as
    the CLI names them (NAME, `browserpool/NAME`)."""
    on = f'{RUNNING_POOLS} AND TemporalWorkerDeploymentVersion="{deployment}:{build}"'
    current = {wf.id async for wf in client.list_workflows(on)}
    behind = []
    async for wf in client.list_workflows(RUNNING_POOLS):
        if wf.id in current:
            continue
        described = await client.get_workflow_handle(wf.id).describe()
        info = described.raw_description.workflow_execution_info.versioning_info
        kind = _KIND_OF_TYPE[wf.workflow_type]
        name = side_of(kind).named(str(kind.name_from_workflow_id(wf.id)))
        behind.append({"pool": name, "build": str(info.deployment_version.build_id)})
    return sorted(behind, key=lambda p: p["pool"])
