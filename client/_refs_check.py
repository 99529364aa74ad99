"""`RefsCheck`: the worker's check of a pool's references, asked by `PoolClient.apply` before
anything starts or changes.

A DevicePool's proxy pool, region and platform are checked by the worker that would serve it
(`check_pool_refs`); a BrowserPool's proxy pool against the names its live nodes' beats carry
(the node registry). Where neither can be asked the pool checks for itself, as before."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import TemporalError
from temporalio.service import RPCError

from devicepool.activities.definitions import DeviceActivityDefinitions as Activities
from devicepool.activities.models import CheckRefsInput, CheckRefsResult, PoolSettings
from devicepool.activities.node_models import LiveNodesInput, NodeProxyPoolsView, NodesView
from devicepool.activities.node_registry import split_nodes
from devicepool.api.browserpool.v1beta1 import BrowserPool
from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL
from devicepool.api.names import (
    NODE_REGISTRY_WORKFLOW_ID,
    QUERY_NODE_PROXY_POOLS,
    QUERY_NODES,
    QUERY_SPEC,
    TASK_QUEUE,
)
from devicepool.api.v1beta1 import DevicePool
from devicepool.client._encrypted_stack import DEFAULT_ACCOUNT
from devicepool.client._temporal_errors import QUERY_TIMEOUT
from devicepool.client.errors import BadInput
from devicepool.workflows.shared.placement import Route

__all__ = ["RefsCheck"]

# `RefsCheck`: how long a worker may take to pick up the check (a busy or absent one: the pool
# checks instead), and to answer it (a region list may be one provider call).
REFS_PICKUP = timedelta(seconds=3)
REFS_ANSWER = timedelta(seconds=10)
# How long an answer (or no way to ask) is kept: the worker keeps its region list as long.
REFS_KEEP_SECONDS = 60.0
# How long the node registry's answer is kept: `apply -f DIR`'s BrowserPools share one read,
# a node worker restarted with a new proxy pool is seen by the next command.
NODES_KEEP_SECONDS = 5.0
# A BrowserPool's live nodes when the worker's `nodeLostAfterSeconds` cannot be asked.
DEFAULT_NODE_LOST_AFTER = LiveNodesInput().lost_after_seconds


class RefsCheck:
    """The worker's own check of a DevicePool's references (`check_pool_refs`: its proxy pool,
    region and platform against the worker's config and the provider's kept region list),
    asked before the pool starts or changes: a typo is refused with nothing created.

    Asked as a standalone activity on the queue the pool's own check would use (a node
    worker's for an account it serves: `pool_settings` says which), once per account, proxy
    pool, region and platform, an answer kept `REFS_KEEP_SECONDS`. Where it cannot be asked
    (a server without standalone activities, no worker picking it up within `REFS_PICKUP`,
    a worker that fails it) the check is the pool's for as long, as before: `Ready=False`
    with the reason, which `--wait` stops at.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        # (account, proxy pool, region, platform) or "settings" -> (when asked, the answer)
        self._kept: dict[Any, tuple[float, asyncio.Future[Any]]] = {}
        self._off_until = float("-inf")
        # Until when the node registry is not read again: it did not answer (each try may
        # take its whole query timeout; the pools check for themselves meanwhile).
        self._registry_off_until = float("-inf")

    async def check(self, pool: DevicePool, *, exists: Callable[[], Awaitable[bool]]) -> None:
        """`BadInput` naming the pool, its file and what the worker refuses, saying nothing
        was created (or, for a pool that runs, `exists`, changed).

        A pool that runs is refused only for what the manifest changes: what it runs with was
        accepted once, and a reference the worker config lost since (the pool stops creating,
        nothing more) must not shut the apply that scales it down or lowers its cap."""
        spec = pool.spec
        proxy = spec.proxy.pool_ref if spec.proxy else None
        key = (spec.account, proxy, spec.region, spec.platform.value)
        problems = await self._once(key, lambda: self._ask(*key))
        if not problems:
            return
        done = "created"
        if await exists():
            done = "changed"
            before = await self._running_refs(pool.name)
            if before is None or before == key:  # unknown, or no reference changes
                return
            had = await self._once(before, lambda: self._ask(*before)) or []
            problems = [problem for problem in problems if problem not in had]
            if not problems:
                return
        where = f"{pool.source}: " if pool.source else ""
        raise BadInput(f"{where}pool {pool.name!r}: {'; '.join(problems)} — nothing was {done}")

    async def check_browser(
        self, pool: BrowserPool, *, exists: Callable[[], Awaitable[bool]]
    ) -> None:
        """`BadInput` for a BrowserPool whose `proxy.poolRef` none of the live nodes its
        `nodeSelector` matches has (the names each node's beats carry), saying nothing was
        created (or, for a pool that runs, changed).

        Only what is known refuses: at least one such node, every one of them naming its
        proxy pools, none this one. No registry, no matching node, a node that does not say
        (an older node worker), a registry of an older build: the pool checks for itself, as
        before. A pool that runs is refused only when the manifest changes its poolRef."""
        ref = pool.spec.proxy.pool_ref if pool.spec.proxy else None
        if ref is None:
            return
        said = await self._unknown_on_nodes(pool.spec.node_selector, ref)
        if said is None:
            return
        done = "created"
        if await exists():
            done = "changed"
            answered, before = await self._running_proxy(pool.name)
            if not answered or before == ref:
                return
        where = f"{pool.source}: " if pool.source else ""
        raise BadInput(f"{where}pool {pool.name!r}: {said} — nothing was {done}")

    async def _unknown_on_nodes(self, selector: dict[str, str], ref: str) -> str | None:
        """What is wrong with `ref` on the nodes `selector` matches, or None: it is there, or
        it cannot be known."""
        if time.monotonic() < self._registry_off_until:
            return None
        seen = await self._once("nodes", self._registry, keep=NODES_KEEP_SECONDS)
        if seen is None:
            self._registry_off_until = time.monotonic() + REFS_KEEP_SECONDS
            return None
        nodes, names = seen
        said = _unknown_proxy_pool(nodes, names, selector, ref, DEFAULT_NODE_LOST_AFTER)
        if said is None:
            return None
        # About to refuse: with the split the pool itself makes (the worker's setting).
        settings = await self._once("settings", lambda: self._run(Activities.pool_settings))
        lost_after = getattr(settings, "node_lost_after_seconds", DEFAULT_NODE_LOST_AFTER)
        if lost_after == DEFAULT_NODE_LOST_AFTER:
            return said
        return _unknown_proxy_pool(nodes, names, selector, ref, lost_after)

    async def _registry(self) -> tuple[NodesView, NodeProxyPoolsView] | None:
        """The node registry's nodes and their proxy pools, or None when it cannot say (never
        started, no worker answering, a build from before `node_proxy_pools`)."""
        handle = self._client.get_workflow_handle(NODE_REGISTRY_WORKFLOW_ID)
        try:
            nodes = await handle.query(
                QUERY_NODES, result_type=NodesView, rpc_timeout=QUERY_TIMEOUT
            )
            names = await handle.query(
                QUERY_NODE_PROXY_POOLS, result_type=NodeProxyPoolsView, rpc_timeout=QUERY_TIMEOUT
            )
        except (TemporalError, RPCError, ValueError):  # ValueError: an answer that does not decode
            return None
        if not isinstance(nodes, NodesView) or not isinstance(names, NodeProxyPoolsView):
            return None
        return nodes, names

    async def _running_proxy(self, name: str) -> tuple[bool, str | None]:
        """Whether a running BrowserPool's `spec` query answered, and its `proxy.poolRef`."""
        handle = self._client.get_workflow_handle(BROWSER_POOL.workflow_id(name))
        try:
            answer = await handle.query(QUERY_SPEC, rpc_timeout=QUERY_TIMEOUT)
        except (TemporalError, RPCError):
            return False, None
        raw = answer.get("spec") if isinstance(answer, dict) else None
        if not isinstance(raw, dict):
            return False, None
        proxy = BROWSER_POOL.conversion.stored_spec_json(raw).get("proxy") or {}
        ref = proxy.get("poolRef") if isinstance(proxy, dict) else None
        return True, ref if isinstance(ref, str) else None

    async def _running_refs(self, name: str) -> tuple[str, str | None, str, str] | None:
        """The references a running pool runs with (its `spec` query), or None when no worker
        answered: the pool's verdict then, as before."""
        handle = self._client.get_workflow_handle(DEVICE_POOL.workflow_id(name))
        try:
            answer = await handle.query(QUERY_SPEC, rpc_timeout=QUERY_TIMEOUT)
        except (TemporalError, RPCError):
            return None
        raw = answer.get("spec") if isinstance(answer, dict) else None
        if not isinstance(raw, dict):
            return None
        spec = DEVICE_POOL.conversion.stored_spec_json(raw)
        account = (spec.get("provider") or {}).get("account") or DEFAULT_ACCOUNT
        proxy = (spec.get("proxy") or {}).get("poolRef")
        region, platform = spec.get("region"), spec.get("platform")
        if not isinstance(region, str) or not isinstance(platform, str):
            return None
        return (str(account), proxy if isinstance(proxy, str) else None, region, platform)

    async def _once(
        self, key: Any, ask: Callable[[], Awaitable[Any]], *, keep: float = REFS_KEEP_SECONDS
    ) -> Any:
        """`ask()`'s answer, shared by every pool that needs it while it is kept."""
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is None or now - kept[0] > keep:
            kept = (now, asyncio.ensure_future(ask()))
            self._kept[key] = kept
        return await asyncio.shield(kept[1])

    async def _ask(
        self, account: str, proxy: str | None, region: str, platform: str
    ) -> list[str] | None:
        """The problems the worker finds (none: []), or None when it could not be asked."""
        settings = await self._once("settings", lambda: self._run(Activities.pool_settings))
        if not isinstance(settings, PoolSettings):
            return None
        where = Route(account, settings.node_of(account)).provider()
        asked = CheckRefsInput(account=account, proxy_pool=proxy, region=region, platform=platform)
        answer = await self._run(Activities.check_pool_refs, asked, where=where)
        if not isinstance(answer, CheckRefsResult):
            return None
        # The account is served (`check_account`): a worker that says otherwise is not the one
        # serving it (a node's account asked of the main worker); the pool asks the right one.
        misplaced = f"account {account!r} (providerCredentialRef)"
        if any(misplaced in problem for problem in answer.problems):
            return None
        return answer.problems

    async def _run(self, activity: Any, *args: Any, where: dict[str, Any] | None = None) -> Any:
        """One standalone activity's answer, or None (and none asked for `REFS_KEEP_SECONDS`)
        when it has none."""
        execute = getattr(self._client, "execute_activity", None)
        if execute is None or time.monotonic() < self._off_until:  # an SDK without them
            return None
        bound = REFS_PICKUP + REFS_ANSWER
        try:
            return await asyncio.wait_for(
                execute(
                    activity,
                    *args,
                    id=f"devicepool-apply-check/{uuid.uuid4()}",
                    task_queue=(where or {}).get("task_queue", TASK_QUEUE),
                    schedule_to_start_timeout=REFS_PICKUP,
                    start_to_close_timeout=REFS_ANSWER,
                    schedule_to_close_timeout=bound,
                    retry_policy=RetryPolicy(maximum_attempts=1),
                    summary="apply's check of a pool's proxy pool, region and platform",
                ),
                timeout=bound.total_seconds() + 5,
            )
        except (TemporalError, TimeoutError):
            # Not here, or not now: the pools check for themselves meanwhile.
            self._off_until = time.monotonic() + REFS_KEEP_SECONDS
            return None


def _unknown_proxy_pool(
    nodes: NodesView,
    names: NodeProxyPoolsView,
    selector: dict[str, str],
    ref: str,
    lost_after: float,
) -> str | None:
    """The refusal of `ref` when every live node `selector` matches named its proxy pools in a
    recent beat and none has it; None when one has it, one does not say, or none matches.
    Both this machine's clock and the registry's (its newest beat) must agree on which nodes
    are alive (a clock skewed from the server's counts a node lost or alive wrongly)."""
    here = _unknown_at(nodes, names, selector, ref, lost_after, datetime.now(UTC))
    newest = max((n.last_seen for n in nodes.nodes), default=None)
    if here is None or newest is None:
        return None
    return here if _unknown_at(nodes, names, selector, ref, lost_after, newest) else None


def _unknown_at(
    nodes: NodesView,
    names: NodeProxyPoolsView,
    selector: dict[str, str],
    ref: str,
    lost_after: float,
    now: datetime,
) -> str | None:
    alive = split_nodes(
        nodes.nodes, selector=selector, lost_after_seconds=lost_after, now=now
    ).alive
    if not alive:
        return None
    known: set[str] = set()
    oldest = 0.0
    for node in alive:
        pools = names.proxy_pools.get(node.node)
        age = max(0.0, (now - node.last_seen).total_seconds())
        # Names from a beat older than two of its intervals may be a process since stopped:
        # a node worker restarted with a new config beats its names only once it is up.
        if pools is None or ref in pools or age > 2 * node.interval_seconds + 1:
            return None
        known.update(pools)
        oldest = max(oldest, age)
    return (
        f"unknown proxy pool {ref!r} (spec.proxy.poolRef) on the nodes its nodeSelector "
        f"matches ({', '.join(n.node for n in alive)}); known: {', '.join(sorted(known)) or 'none'}"
        f" (as their beats named them, the oldest {oldest:.0f}s ago)"
    )
