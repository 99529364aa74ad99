"""`AccountProviders`: the worker's accounts, each behind its provider adapter, for the activities.

The base of `DeviceActivities` and its mixins: one adapter per account, built once
(`providers.registry`) and closed by `aclose()`; the proxy pools, the metrics, the
worker's `Scrubber`; each pool's last listing, kept a few minutes for the health
check's watch. Keys and passwords are resolved here, worker-side, and never logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from devicepool.activities.device_models import DeviceInfo, DeviceStatus
from devicepool.activities.errors import ProviderError, configuration_error
from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.base import Provider, provider_call
from devicepool.activities.providers.registry import PhonePacer, Transport, build_provider
from devicepool.activities.proxy import resolve_proxy
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import AccountSettings, PoolSettings, ProxyPoolSettings
from devicepool.api.errors import ErrorType

__all__ = [
    "LISTING_KEEP_SECONDS",
    "REGIONS_KEEP_SECONDS",
    "REGIONS_RECHECK_SECONDS",
    "AccountProviders",
]

logger = logging.getLogger(__name__)

# Listings older than this are dropped from the reuse cache (a deleted pool's among them).
LISTING_KEEP_SECONDS = 600.0

# How long an account's region list is trusted: every pool pass checks its region,
# and regions change about never.
REGIONS_KEEP_SECONDS = 60.0
# A region missing from the kept list is looked up again if the list is older than this.
REGIONS_RECHECK_SECONDS = 2.0


class AccountProviders:
    """One provider adapter per configured account, and what the activities share."""

    def __init__(
        self,
        *,
        accounts: Mapping[str, AccountSettings],
        proxy_pools: Mapping[str, ProxyPoolSettings],
        settings: PoolSettings | None = None,
        transport: Transport | None = None,
        metrics: Metrics | None = None,
        scrubber: Scrubber | None = None,
        phone_pacer: PhonePacer | None = None,
    ) -> None:
        """`phone_pacer`: one cloud-phone budget for every `api: bitbrowser` account here
        (a node worker's); None: one each. Accounts served by a node worker (`node`)
        get no adapter: their calls run on that node."""
        self._settings = settings or PoolSettings()
        # Every secret the worker holds (`scrubber`, built once from its config)
        # and, in any case, those handed here: cleaned out of every provider text.
        own = Scrubber.of(accounts=accounts.values(), proxy_pools=proxy_pools.values())
        self._scrubber = own if scrubber is None else scrubber | own
        # A private registry unless the worker hands its own (the one it serves).
        self.metrics = metrics if metrics is not None else Metrics()
        self._proxy_pools = dict(proxy_pools)
        for pool in self._proxy_pools.values():
            # Fail at worker start, not on the first create, if a template is broken.
            resolve_proxy(pool, idempotency_key="check", ttl=0)
        self._providers: dict[str, Provider] = {
            name: build_provider(
                account,
                transport=transport,
                metrics=self.metrics,
                scrubber=self._scrubber,
                phone_pacer=phone_pacer,
            )
            for name, account in accounts.items()
            if not account.node
        }
        self._nodes = {name: account.node for name, account in accounts.items() if account.node}
        # (account, pool) -> (monotonic time, wall time, devices) of the last listing
        self._listings: dict[tuple[str, str], tuple[float, datetime, list[DeviceInfo]]] = {}
        self._listings_swept = time.monotonic()
        # account -> (monotonic time, the provider's regions or None when it cannot list them)
        self._regions: dict[str, tuple[float, list[str] | None]] = {}

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()

    def _provider(self, account: str) -> Provider:
        provider = self._providers.get(account)
        if provider is None:
            raise configuration_error(ErrorType.UNKNOWN_ACCOUNT, self._unknown_account(account))
        return provider

    def _unknown_account(self, account: str) -> str:
        if node := self._nodes.get(account):
            return (
                f"account {account!r} (providerCredentialRef) is served by node worker "
                f"{node!r}, not by this worker: its calls belong on that node's queue"
            )
        known = ", ".join(sorted(self._providers)) or "(none)"
        return f"unknown account {account!r} (providerCredentialRef); known: {known}"

    def _unknown_proxy_pool(self, pool: str) -> str:
        known = ", ".join(sorted(self._proxy_pools)) or "(none)"
        return f"unknown proxy pool {pool!r} (proxy.poolRef); known: {known}"

    def _unknown_region(self, region: str, known: list[str]) -> str:
        return f"unknown region {region!r} (spec.region); known: {', '.join(known) or '(none)'}"

    async def _region_names(
        self, account: str, *, newer_than: float | None = None
    ) -> list[str] | None:
        """The account's provider's regions, sorted (kept `REGIONS_KEEP_SECONDS`, or listed
        again when the kept list is older than `newer_than` seconds), or None when it cannot
        list them: then regions are not checked, never refused."""
        hit = self._regions.get(account)
        keep = REGIONS_KEEP_SECONDS if newer_than is None else newer_than
        if hit is not None and time.monotonic() - hit[0] <= keep:
            return hit[1]
        try:
            names = sorted(set(await self._provider(account).region_names())) or None
            if names is None:
                logger.warning("account %s: the provider lists no regions; not checked", account)
        except ProviderError as exc:
            logger.warning(
                "account %s: cannot list the provider's regions, so regions are not checked: %s",
                account,
                exc,
            )
            names = None
        self._regions[account] = (time.monotonic(), names)
        return names

    async def _pool_devices(self, account: str, pool: str) -> list[DeviceInfo]:
        """The pool's devices at the provider that are not `terminated` (raises ProviderError)."""
        with provider_call(pool=pool):
            listed = await self._provider(account).list_pool(pool)
        devices = [d for d in listed if d.status != DeviceStatus.TERMINATED]
        for d in devices:
            self.metrics.device_seen(
                d.id, d.status, created_at=d.created_at, updated_at=d.updated_at
            )
        self._remember(account, pool, devices)
        return devices

    def _remember(self, account: str, pool: str, devices: list[DeviceInfo]) -> None:
        now = time.monotonic()
        self._listings[(account, pool)] = (now, datetime.now(UTC), devices)
        if now - self._listings_swept >= LISTING_KEEP_SECONDS:
            self._listings_swept = now
            for key, (at, _, _) in list(self._listings.items()):
                if now - at > LISTING_KEEP_SECONDS:
                    del self._listings[key]

    def _shared_listing(
        self, account: str, pool: str, max_age: float
    ) -> tuple[datetime, list[DeviceInfo]] | None:
        """(when it was made, the listing): this process's last listing of the pool if
        at most `max_age` seconds old, else None."""
        hit = self._listings.get((account, pool))
        if max_age > 0 and hit is not None and time.monotonic() - hit[0] <= max_age:
            return hit[1], hit[2]
        return None

    async def _new_listing(self, account: str, pool: str) -> tuple[datetime, list[DeviceInfo]]:
        """(when it was made, the listing) of a provider read now (raises ProviderError)."""
        devices = await self._pool_devices(account, pool)
        return self._listings[(account, pool)][1], devices
