"""The provider seam: the one narrow interface the activities use to reach a provider.

An adapter speaks one provider transport for one account: `rest` (the REST
contract of DESIGN.md, `providers/rest.py`) today; BitBrowser's Local API for
cloud phones and for browser profiles fit behind the same methods (no
idempotency key: a create first looks for its mark; no delete: `remove_device`
powers the phone off). The engine never learns which one it talks to.

Adapters answer in the pool's own views (`DeviceInfo`, `DeviceStatusInfo`)
and fail only with the `ProviderError` tree of `activities.errors`. They hold
the account's secret; what they return never does. No HTTP client here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from devicepool.activities.device_models import DeviceInfo, DeviceStatusInfo
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.proxy import ResolvedProxy

__all__ = ["PROVIDER_APIS", "NewDevice", "Provider", "ProviderDevice"]

# The adapters a worker config may name per account (`accounts.<name>.api`).
PROVIDER_APIS = ("rest",)


@dataclass(frozen=True)
class NewDevice:
    """One create as the engine asks for it. Worker-side only: the proxy holds its password."""

    template: DeviceTemplate
    name: str
    labels: Mapping[str, str]
    # The same key for every attempt of one slot's create: a provider that
    # knows keys replays the first answer; one that does not looks for `name`.
    idempotency_key: str
    proxy: ResolvedProxy | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ProviderDevice:
    """A device as the provider lists it: the pool's view, and its platform."""

    info: DeviceInfo
    platform: str = ""


class Provider(Protocol):
    """One account at one provider. Every method raises `ProviderError` on failure."""

    async def list_pool(self, pool: str) -> list[DeviceInfo]:
        """The pool's devices, every status (terminated ones included, if listed)."""
        ...

    async def list_managed(self) -> list[ProviderDevice]:
        """Every device devicepool manages on the account, any pool (the orphan sweep)."""
        ...

    async def get_device(self, device_id: str) -> ProviderDevice:
        """One device (`NotFoundError` when the provider does not know it)."""
        ...

    async def create_device(self, new: NewDevice) -> DeviceInfo:
        """Create one device, or answer the one an earlier attempt of the same key made."""
        ...

    async def remove_device(self, device_id: str) -> None:
        """Stop paying for the device (`NotFoundError` when it is gone already)."""
        ...

    async def read_statuses(self, ids: list[str]) -> tuple[list[DeviceStatusInfo], list[str]]:
        """The statuses of at most 100 devices, and the ids the provider does not know."""
        ...

    async def region_status(self, region: str) -> str:
        """`up`, `degraded`, `down`, or `unknown` when the provider does not list it."""
        ...

    async def region_names(self) -> list[str]:
        """Every region the provider lists (`ProviderError` when it cannot list them)."""
        ...

    async def aclose(self) -> None: ...
