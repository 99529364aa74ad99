"""The provider seam: the one narrow interface the activities use to reach a provider.

An adapter speaks one transport for one account (`registry.ADAPTERS`); the engine never
learns which (docs/providers.md, "The provider seam"). Adapters answer in the pool's
views and fail only with the `ProviderError` tree; what they return holds no secret.
`provider_call(pool=..., replacement=...)` says whom the calls made inside it serve:
an adapter with a shared request budget hands its turns out by it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from devicepool.activities.connect_models import ConnectInfo
from devicepool.activities.device_models import DeviceInfo, DeviceStatusInfo
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.proxy import ResolvedProxy
from devicepool.activities.settings import ProxyPoolSettings

__all__ = [
    "PROVIDER_APIS",
    "NewDevice",
    "ParkedShutdown",
    "ParkedSweep",
    "Provider",
    "ProviderCall",
    "ProviderDevice",
    "current_call",
    "provider_call",
]

# The adapters a worker config may name per account (`accounts.<name>.api`).
PROVIDER_APIS = ("rest", "bitbrowser", "geelark")


@dataclass(frozen=True)
class ProviderCall:
    """Whom a provider call serves: a pool (`""`: none known) and whether it replaces a device."""

    pool: str = ""
    replacement: bool = False
    # The pool's `spec.reserve.keep` on a removal (None: keep every profile in reserve).
    reserve_keep: int | None = None
    # The caller acts on this read at once (the health check's read at a deadline): an
    # adapter that keeps status answers between listings reads its suspects again.
    fresh: bool = False
    # The pool is being deleted (`terminate_pool`): a removal lets the device go, with
    # no read and no repair spent on it (an adapter that keeps it parks it for good).
    deleting: bool = False
    # The device served a lease and was not reset (`onRelease: replace`, a reset not
    # possible): a removal never hands it, unreset, to a later create.
    used: bool = False
    # The pool retires the device (past `lifetime.maxAge`, a person's `replace
    # --when-idle`, a rollout's drift): removed only if idle as a scale-down is, but an
    # adapter that keeps scaled-down devices for later creates deletes it.
    retiring: bool = False
    # On a create: the pool's `spec.reserve.keep`, 0 when unset; None: not told (a batch an
    # older build started). An adapter that claims parked devices for creates claims only
    # under a keep of 1 or more, and deletes what is parked past it.
    claim_keep: int | None = None
    # The orphan sweep's reads and removals: an adapter shows it what it hides from pools
    # and from the ledger's device count (a GeeLark node's stopped reserve phones), so
    # that those of a pool gone without its teardown are removed.
    sweeping: bool = False


_NOBODY = ProviderCall()
_CALL: ContextVar[ProviderCall | None] = ContextVar("devicepool_provider_call", default=None)


def current_call() -> ProviderCall:
    """The `ProviderCall` of the code running now (no pool, not a replacement outside one)."""
    return _CALL.get() or _NOBODY


@contextmanager
def provider_call(
    *,
    pool: str | None = None,
    replacement: bool | None = None,
    reserve_keep: int | None = None,
    fresh: bool | None = None,
    deleting: bool | None = None,
    used: bool | None = None,
    retiring: bool | None = None,
    claim_keep: int | None = None,
    sweeping: bool | None = None,
) -> Iterator[None]:
    """Provider calls made inside are for `pool` (a replacement's when `replacement`;
    a read acted on at once when `fresh`; the pool's deletion when `deleting`).

    What is not given is kept from the enclosing `provider_call`.
    """
    outer = current_call()
    token = _CALL.set(
        ProviderCall(
            pool=outer.pool if pool is None else pool,
            replacement=outer.replacement if replacement is None else replacement,
            reserve_keep=outer.reserve_keep if reserve_keep is None else reserve_keep,
            fresh=outer.fresh if fresh is None else fresh,
            deleting=outer.deleting if deleting is None else deleting,
            used=outer.used if used is None else used,
            retiring=outer.retiring if retiring is None else retiring,
            claim_keep=outer.claim_keep if claim_keep is None else claim_keep,
            sweeping=outer.sweeping if sweeping is None else sweeping,
        )
    )
    try:
        yield
    finally:
        _CALL.reset(token)


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

    async def connect_info(self, device_id: str) -> ConnectInfo:
        """How a lease's holder reaches the device (its ADB login), read now; an empty one
        with `message` when the provider offers none (`NotFoundError`: no such device).
        Secret-bearing: never logged, never in an error."""
        ...

    async def reset_device(self, device_id: str) -> bool:
        """Clear the device for its next user (a cloud phone's fresh start: `onRelease:
        reset`), True once asked; False where the provider has no reset (the pool replaces
        the device instead). `QuotaExceededError`: no reset left for it now;
        `NotFoundError`: no such device."""
        ...

    async def region_status(self, region: str) -> str:
        """`up`, `degraded`, `down`, or `unknown` when the provider does not list it."""
        ...

    async def region_names(self) -> list[str]:
        """Every region the provider lists (`ProviderError` when it cannot list them)."""
        ...

    def platform_problem(self, platform: str) -> str | None:
        """Why the account cannot make devices of `platform` (None: it can)."""
        ...

    def proxy_problem(self, proxy: ProxyPoolSettings | None) -> str | None:
        """Why the account cannot make devices behind `proxy`, the pool's proxy pool
        (None: the pool names none), before any create (None: it can)."""
        ...

    async def release_pool(self, pool: str) -> int:
        """A deleted pool's devices are all removed: let go of what the provider keeps of it
        (profiles kept powered off are marked retired); how many profiles of the pool the
        provider still keeps, all retired now (0 where a removal deletes)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ParkedShutdown:
    """A parked profile (kept powered off, not serving) the orphan sweep found still
    powered and sent a shutdown again. Ids and names only."""

    phone_id: str
    pool: str
    state: str  # reserve | retired
    status: int | None


@runtime_checkable
class ParkedSweep(Protocol):
    """An adapter that parks profiles instead of deleting them (BitBrowser cloud phones):
    the orphan sweep calls it after `list_managed`. Others do not implement it: nothing
    of theirs bills while parked."""

    async def shut_down_parked(
        self, budget_seconds: float = ..., sent: list[ParkedShutdown] | None = None
    ) -> list[ParkedShutdown]:
        """Send a shutdown again to parked profiles listed powered past a grace (a bounded
        number a call, each read again first, none started past `budget_seconds`, one's
        failure passed over); what was sent, each also appended to `sent` as it is."""
        ...
