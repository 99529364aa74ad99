"""`NodeBrowserActivities`: a node worker's BrowserPool activities over its profile provider.

Served only by a node worker, on `node_task_queue(node)`. Each is one call of the
node's `ProfileProvider` with a heartbeat, the proxy resolved from this worker's
`proxyPools` (a session id per pool and slot). Every failure leaves as
`to_application_error`, its message scrubbed by the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from devicepool.activities import connect_models as cm
from devicepool.activities import node_models as nm
from devicepool.activities.errors import ProviderError, configuration_error, to_application_error
from devicepool.activities.heartbeats import heartbeating
from devicepool.activities.node_definitions import NodeActivityDefinitions
from devicepool.activities.providers.profiles import NewProfile, ProfileProvider, UnfitProfile
from devicepool.activities.proxy import ResolvedProxy, resolve_proxy
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType

__all__ = ["NodeBrowserActivities"]


class NodeBrowserActivities(NodeActivityDefinitions):
    """Bound activities over one node's browser profiles (its provider) and proxy pools."""

    def __init__(
        self,
        provider: ProfileProvider,
        *,
        node: str,
        proxy_pools: Mapping[str, ProxyPoolSettings] | None = None,
        history_encrypted: bool = False,
    ) -> None:
        self.provider = provider
        self.node = node
        self._proxy_pools = dict(proxy_pools or {})
        # Whether this worker encrypts what it writes to history (its payload codec).
        self.history_encrypted = history_encrypted

    def __repr__(self) -> str:
        return (
            f"NodeBrowserActivities(node={self.node!r}, {self.provider!r}, "
            f"proxy_pools={sorted(self._proxy_pools)!r})"
        )

    def activities(self) -> list[Any]:
        """What the node's task queue serves."""
        return [
            self.node_list_profiles,
            self.node_create_profile,
            self.node_open_profile,
            self.node_delete_profile,
            self.node_lease_connect,
        ]

    async def aclose(self) -> None:
        await self.provider.aclose()

    @activity.defn
    async def node_list_profiles(self, input: nm.NodeListInput) -> nm.NodeListResult:
        try:
            async with heartbeating():
                return nm.NodeListResult(profiles=await self.provider.list_pool(input.pool))
        except ProviderError as exc:
            raise to_application_error(exc) from None

    @activity.defn
    async def node_create_profile(self, input: nm.NodeCreateInput) -> nm.ProfileView:
        new = NewProfile(
            pool=input.pool,
            slot=input.slot,
            node=self.node,
            fingerprint=input.fingerprint,
            group_id=input.group_id,
            proxy=self._proxy(input),
        )
        try:
            async with heartbeating():
                made = await self.provider.create_profile(new)
        except UnfitProfile as err:  # no mark can hold this pool, slot or node
            raise ApplicationError(
                f"pool {input.pool!r} slot {input.slot!r}: {err}",
                type=ErrorType.INVALID_ARGUMENT.value,
                non_retryable=True,
            ) from None
        except ProviderError as exc:
            activity.logger.info("pool %s slot %s: create failed: %s", input.pool, input.slot, exc)
            raise to_application_error(exc) from None
        activity.logger.info(
            "pool %s slot %s: profile %s on node %s", input.pool, input.slot, made.id, self.node
        )
        return made

    def _proxy(self, input: nm.NodeCreateInput) -> ResolvedProxy | None:
        if input.proxy_pool is None:
            return None
        settings = self._proxy_pools.get(input.proxy_pool)
        if settings is None:
            raise configuration_error(
                ErrorType.UNKNOWN_PROXY_POOL,
                f"proxy pool {input.proxy_pool!r} is not configured on node {self.node} "
                f"(configured: {', '.join(sorted(self._proxy_pools)) or 'none'})",
            )
        try:
            return resolve_proxy(
                settings,
                idempotency_key=f"browserpool:{input.pool}:{input.slot}",
                ttl=input.session_ttl_seconds,
            )
        except ValueError as err:
            raise configuration_error(ErrorType.UNKNOWN_PROXY_POOL, str(err)) from None

    @activity.defn
    async def node_open_profile(self, input: nm.NodeOpenInput) -> nm.NodeOpenResult:
        try:
            async with heartbeating():
                return await self.provider.open_profile(input.id)
        except ProviderError as exc:
            raise to_application_error(exc) from None

    @activity.defn
    async def node_delete_profile(self, input: nm.NodeDeleteInput) -> None:
        try:
            async with heartbeating():
                await self.provider.remove_profile(input.id)
        except ProviderError as exc:
            raise to_application_error(exc) from None
        activity.logger.info("profile %s deleted (node %s)", input.id, self.node)

    @activity.defn
    async def node_lease_connect(self, input: cm.NodeConnectInput) -> cm.ConnectInfo:
        """Refused while this node writes payloads in clear: its result goes to history."""
        if not self.history_encrypted:
            raise ApplicationError(
                cm.NOT_ENCRYPTED, type=ErrorType.INVALID_STATE.value, non_retryable=True
            )
        try:
            async with heartbeating():
                return await self.provider.connect_profile(input.id)
        except ProviderError as exc:
            raise to_application_error(exc) from None
