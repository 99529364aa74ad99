"""A BrowserPool's activity calls: the node registry, and each node's own task queue.

Failures become answers here: a failed listing is (reason, cause), a failed open says
whether it counts toward the profile's failure streak.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.connect_models import ConnectInfo, NodeConnectInput
    from devicepool.activities.node_definitions import (
        NodeActivityDefinitions,
        NodeRegistryActivityDefinitions,
    )
    from devicepool.activities.node_models import (
        NODE_OPEN_BUDGET_SECONDS,
        LiveNodesInput,
        LiveNodesResult,
        NodeCreateInput,
        NodeDeleteInput,
        NodeListInput,
        NodeOpenInput,
        NodeOpenResult,
        ProfileView,
    )
    from devicepool.api import names
    from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
    from devicepool.api.errors import ErrorType
    from devicepool.workflows.browserpool.observe import LOCAL_API_REFUSED, NODE_UNREACHABLE
    from devicepool.workflows.shared.errors import error_type

__all__ = [
    "NODE_CALL",
    "NODE_LISTING",
    "NODE_OPEN",
    "NODE_OPEN_HEARTBEAT",
    "NODE_PICKUP",
    "cause",
    "connect_on",
    "counts_against_profile",
    "create_on",
    "delete_on",
    "error_type",
    "list_on",
    "live_nodes",
    "node_failure",
    "open_on",
    "open_outcome",
]

# A node call waits this long for its node worker to take it: a node that died
# costs one pass this much, and the next pass asks the registry again.
NODE_PICKUP = timedelta(seconds=15)
NODE_CALL = timedelta(seconds=90)
# An open outlasts the node's own budget for it (a queued `/browser/open`, a reset and one
# more), with a minute to spare: cut sooner, a slow open would count as the profile's
# failure. A node that died meanwhile is found by its heartbeat, not by this deadline.
NODE_OPEN = timedelta(seconds=NODE_OPEN_BUDGET_SECONDS + 60)
NODE_OPEN_HEARTBEAT = timedelta(seconds=30)
# A listing is one or two Local API calls: a node that took one and went silent
# (frozen, its machine asleep) costs a pass this much, not NODE_CALL.
NODE_LISTING = timedelta(seconds=15)
# Failures of an open that say nothing of the profile (the node's key, its budget).
# A desktop client that went away or did not answer in time is the node's trouble too.
NODE_TROUBLE_TYPES = {
    ErrorType.UNAUTHENTICATED.value,
    ErrorType.RATE_LIMITED.value,
    ErrorType.TIMEOUT.value,
    ErrorType.TRANSPORT.value,
    ErrorType.QUOTA_EXCEEDED.value,  # the account's balance: every open would meet it
}
ONCE = RetryPolicy(maximum_attempts=1)
NODE = NodeActivityDefinitions


async def live_nodes(selector: Mapping[str, str], *, lost_after_seconds: float) -> LiveNodesResult:
    """The live and lost node workers `selector` picks ({}: every node)."""
    return await workflow.execute_activity_method(
        NodeRegistryActivityDefinitions.live_nodes,
        LiveNodesInput(selector=dict(selector), lost_after_seconds=lost_after_seconds),
        start_to_close_timeout=timedelta(seconds=30),
        summary="which node workers are alive",
    )


async def _on(
    node: str,
    activity: Callable[..., Awaitable[Any]],
    arg: Any,
    summary: str,
    *,
    within: timedelta = NODE_CALL,
    heartbeat: timedelta | None = None,
    wait_when_cancelled: bool = False,
) -> Any:
    return await workflow.execute_activity_method(
        activity,
        arg,
        task_queue=names.node_task_queue(node),
        schedule_to_start_timeout=NODE_PICKUP,
        start_to_close_timeout=within,
        heartbeat_timeout=heartbeat,
        retry_policy=ONCE,
        # Cancelled (a delete), a create or an open ends on the node before teardown
        # lists and deletes: a profile made after its listing would be left behind, a
        # browser opening as its profile is deleted could come up.
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        if wait_when_cancelled
        else ActivityCancellationType.TRY_CANCEL,
        summary=f"{summary} on {node}",
    )


async def list_on(
    nodes: Sequence[str], pool: str
) -> dict[str, list[ProfileView] | tuple[str, str]]:
    """Each node's listing of the pool's profiles, side by side, or why it failed."""

    async def one(node: str) -> list[ProfileView] | tuple[str, str]:
        try:
            answer = await _on(
                node,
                NODE.node_list_profiles,
                NodeListInput(pool=pool),
                "list the pool's profiles",
                within=NODE_LISTING,
            )
            return list(answer.profiles)
        except ActivityError as err:
            return node_failure(err)

    answers = await asyncio.gather(*(one(n) for n in nodes))
    return dict(zip(nodes, answers, strict=True))


async def create_on(node: str, pool: str, spec: BrowserPoolSpec, slot: int) -> ProfileView:
    """The slot's profile made on `node` as `spec` says (its proxy by pool name: the node
    holds the gateway and its password)."""
    body = NodeCreateInput(
        pool=pool,
        slot=str(slot),
        fingerprint=dict(spec.fingerprint),
        proxy_pool=spec.proxy.pool_ref if spec.proxy else None,
        session_ttl_seconds=spec.proxy.session_ttl if spec.proxy else 0,
        group_id=spec.group_id,
    )
    made: ProfileView = await _on(
        node, NODE.node_create_profile, body, "create a profile", wait_when_cancelled=True
    )
    return made


async def delete_on(node: str, profile_id: str) -> None:
    await _on(
        node,
        NODE.node_delete_profile,
        NodeDeleteInput(id=profile_id),
        "close, confirm and delete a profile",
    )


async def open_on(node: str, profile_id: str) -> NodeOpenResult | ActivityError:
    try:
        opened: NodeOpenResult = await _on(
            node,
            NODE.node_open_profile,
            NodeOpenInput(id=profile_id),
            "open a browser",
            within=NODE_OPEN,
            heartbeat=NODE_OPEN_HEARTBEAT,
            wait_when_cancelled=True,
        )
        return opened
    except ActivityError as err:
        return err


async def connect_on(node: str, profile_id: str) -> ConnectInfo:
    """A leased profile's CDP endpoint, from its node (its browser opened if it is not: a
    `lease_connect` update waits for this, so no longer than a node call)."""
    info: ConnectInfo = await _on(
        node,
        NODE.node_lease_connect,
        NodeConnectInput(id=profile_id),
        "connect info of a profile",
        heartbeat=NODE_OPEN_HEARTBEAT,
    )
    return info


def cause(err: ActivityError) -> str:
    found = err.cause
    return str(found.message if found is not None and hasattr(found, "message") else err)[:200]


def node_failure(err: ActivityError) -> tuple[str, str]:
    """Why a node's listing failed: (condition reason, cause)."""
    found = err.cause
    if isinstance(found, ActivityTimeoutError):
        if found.type == TimeoutType.SCHEDULE_TO_START:
            waited = NODE_PICKUP.total_seconds()
            return NODE_UNREACHABLE, f"its node worker took no call in {waited:g}s"
        return NODE_UNREACHABLE, f"no answer in {NODE_LISTING.total_seconds():g}s"
    if error_type(err) == ErrorType.UNAUTHENTICATED.value:
        return LOCAL_API_REFUSED, cause(err)
    return NODE_UNREACHABLE, cause(err)


def open_outcome(opened: NodeOpenResult | ActivityError) -> tuple[bool, str, bool]:
    """An open's outcome: (open, why not, whether it counts toward the profile's streak)."""
    if isinstance(opened, ActivityError):
        return False, cause(opened), counts_against_profile(opened)
    return opened.open, opened.reason, not opened.node_trouble


def counts_against_profile(err: ActivityError) -> bool:
    """Whether a failed open counts toward the profile's failure streak (whose end deletes
    it, cookies and all): not when the node, not the profile, is the trouble (the open
    timed out, its desktop client went away, the node's key or budget was refused)."""
    if isinstance(err.cause, ActivityTimeoutError):
        return False
    return error_type(err) not in NODE_TROUBLE_TYPES
