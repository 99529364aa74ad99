"""The `bitbrowser` adapter: a DevicePool's devices as BitBrowser cloud phones (`CloudPhones`).

One adapter per account (`api: bitbrowser`), a `providers.Provider`. A create finds
its slot's mark, else claims a `reserve` profile of its pool and template, else adds
a profile, and powers it on; a remove shuts the phone down and parks the profile
(`phone_reserve`), or retires it (a retirement, its pool deleted). `region_names` is empty, `region_status` `unknown`; an iOS create
is refused, permanently. Every call takes its turn on the account's `PhonePacer`;
reserve claims are one at a time in this process only, so the account needs `node:
NAME`. Secrets never reach a result or an error. How and why: docs/providers.md,
"The cloud-phone adapter".
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from weakref import WeakValueDictionary

from devicepool.activities.connect_models import ConnectInfo
from devicepool.activities.device_models import DeviceInfo, DeviceStatusInfo
from devicepool.activities.errors import InvalidArgumentError, NotFoundError
from devicepool.activities.heartbeats import end_if_cancelled_unsent
from devicepool.activities.providers.base import (
    NewDevice,
    ParkedShutdown,
    ProviderDevice,
    current_call,
    provider_call,
)
from devicepool.activities.providers.bitbrowser._paging import MAX_PAGE_SIZE, oldest_first
from devicepool.activities.providers.bitbrowser.models import (
    ComputeType,
    Phone,
    PhoneProxy,
    PhoneStatus,
)
from devicepool.activities.providers.bitbrowser.phone_listings import Listing, PoolListings
from devicepool.activities.providers.bitbrowser.phone_marks import (
    ACTIVE,
    MARK_PREFIX,
    RETIRED,
    Remark,
    parse_device_id,
    slot_mark,
)
from devicepool.activities.providers.bitbrowser.phone_parked import ParkedPower
from devicepool.activities.providers.bitbrowser.phone_reads import PROBES_PER_LISTING, PhoneReads
from devicepool.activities.providers.bitbrowser.phone_reserve import Reserve
from devicepool.activities.providers.bitbrowser.phones import CloudPhones
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_POOL

__all__ = ["ANDROID_ONLY", "PROXY_NEEDED", "PhoneProvider"]

ANDROID_ONLY = "the BitBrowser Local API has Android cloud phones only"
PROXY_NEEDED = "a cloud phone's proxy needs a host, port, username and password"
_NO_PROXY = f"{PROXY_NEEDED}: set spec.proxy.poolRef"


class PhoneProvider:
    """One account's cloud phones as a DevicePool's devices (implements `providers.Provider`)."""

    def __init__(
        self,
        phones: CloudPhones,
        *,
        compute_type: ComputeType = ComputeType.TEMPORARY,
        probe_seconds: float | None = None,
        probes_per_listing: int = PROBES_PER_LISTING,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.phones = phones
        # Temporary compute: billed exactly while powered on (monthly ignores power).
        self.compute_type = compute_type
        self.reads = PhoneReads(
            phones,
            probe_seconds=probe_seconds,
            probes_per_listing=probes_per_listing,
            clock=clock,
        )
        self._wall = wall_clock
        self._clock = clock
        self.listings = PoolListings(phones, wall_clock=wall_clock, clock=clock)
        # phone id -> (when, the profile) of a look-up by id: a scale-down's idle check and
        # its remove, a moment apart, read the profile once.
        self._looked: dict[str, tuple[float, Phone]] = {}
        self.lookup_seconds = 2 * phones.pacer.interval
        self.reserve = Reserve(
            phones,
            self.listings,
            forget=self._forget,
            wall_clock=wall_clock,
            clock=clock,
            held=lambda phone_id: self.parked.holds(phone_id),
        )
        self.parked = ParkedPower(phones, self.listings, clock=clock)
        # slot mark -> the lock one create of that slot holds at a time; an entry goes
        # with the last create that holds or waits for it.
        self._slots: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    def __repr__(self) -> str:
        return f"PhoneProvider({self.phones!r})"

    # ------------------------------------------------------------ reads

    async def list_pool(self, pool: str) -> list[DeviceInfo]:
        with provider_call(pool=pool):
            found = await self.listings.pool_phones(pool)
            return await self.reads.infos([(p, r) for p, r in found if r.state == ACTIVE])

    async def list_managed(self) -> list[ProviderDevice]:
        found = await self.listings.marked(MARK_PREFIX)
        self.parked.observe(found)  # the reserve profiles: any left powered?
        infos = await self.reads.infos([(p, r) for p, r in found if r.state == ACTIVE])
        return [ProviderDevice(info, "android") for info in infos]

    async def shut_down_parked(
        self, budget_seconds: float = math.inf, sent: list[ParkedShutdown] | None = None
    ) -> list[ParkedShutdown]:
        """The orphan sweep's, after `list_managed`: a shutdown sent again to reserve
        profiles still listed powered (`phone_parked`), none started past the budget."""
        return await self.parked.shut_down(budget_seconds, sent)

    async def get_device(self, device_id: str) -> ProviderDevice:
        # No `running` read: a kept answer or the listing's word. The callers (a
        # scale-down's idle check, a replacement's reason, the orphan sweep) act on
        # no `offline` that the pool's listings and the health check have not read.
        phone, remark = await self._serving(device_id)
        with provider_call(pool=remark.pool):
            (info,) = await self.reads.infos([(phone, remark)], probe=False)
            return ProviderDevice(info, "android")

    async def connect_info(self, device_id: str) -> ConnectInfo:
        """The phone's ADB login from `/phone/list` (docs/providers.md, "Connect info"): two
        turns of the budget at most (the profile, unless just looked up, then its login)."""
        phone, remark = await self._serving(device_id)
        adb = None
        if phone.seq is not None:
            with provider_call(pool=remark.pool):
                adb = await self.phones.adb_login(phone.id, seq=phone.seq)
        if adb is None:
            return ConnectInfo(
                message=f"cloud phone {device_id}: no ADB login listed (is ADB enabled for"
                " its environment in the BitBrowser client, and is the phone running?)"
            )
        return ConnectInfo(adb=adb)

    async def reset_device(self, device_id: str) -> bool:
        """A fresh start (`/phone/profile/recover`: 60 a profile a month, then
        `LocalApiQuotaError`); the phone boots again, `rebooting` meanwhile
        (`PhoneReads.reset`). A retry of one just asked here asks nothing again."""
        phone, remark = await self._serving(device_id)
        if self.reads.resetting(phone.id):
            return True
        with provider_call(pool=remark.pool):
            await self.phones.recover(phone.id)
        self._forget(phone.id)
        self.reads.reset(phone.id)
        return True

    async def read_statuses(self, ids: list[str]) -> tuple[list[DeviceStatusInfo], list[str]]:
        # A batch's boot check names its pool: one listing of that pool, joined by the
        # pool's other calls waiting for the budget, not every pool's profiles.
        pool = current_call().pool
        listed = (
            await self.listings.pool_phones(pool)
            if pool
            else await self.listings.marked(MARK_PREFIX)
        )
        by_id = {p.id: (p, r) for p, r in listed}
        hits: list[tuple[Phone, Remark]] = []
        not_found: list[str] = []
        for wanted in ids:
            parsed = parse_device_id(wanted)
            hit = by_id.get(parsed[0]) if parsed else None
            if parsed is None or hit is None or not hit[1].serves(parsed[1]):
                not_found.append(wanted)
            else:
                hits.append(hit)
        items = [
            DeviceStatusInfo(id=i.id, status=i.status, reason=i.reason, updated_at=i.updated_at)
            for i in await self.reads.infos(hits)
        ]
        return items, not_found

    async def region_status(self, region: str) -> str:
        return "unknown"  # the Local API says nothing of a region's health

    async def region_names(self) -> list[str]:
        return []  # no region list: the engine does not check a pool's region

    def platform_problem(self, platform: str) -> str | None:
        return None if platform == "android" else f"platform {platform}: {ANDROID_ONLY}"

    def proxy_problem(self, proxy: ProxyPoolSettings | None) -> str | None:
        """The Local API refuses a profile without a proxy host, port, user and password."""
        if proxy is None:
            return _NO_PROXY
        missing = [
            what
            for what, value in (
                ("username (usernameTemplate)", proxy.username_template),
                ("password (passwordFile or passwordEnv)", proxy.password.get_secret_value()),
            )
            if not value
        ]
        if missing:
            return (
                f"proxy pool {proxy.name!r} has no {' and no '.join(missing)} in the worker "
                f"config: {PROXY_NEEDED}"
            )
        return None

    # ------------------------------------------------------------ create

    async def create_device(self, new: NewDevice) -> DeviceInfo:
        template = new.template
        problem = self.platform_problem(str(template.platform))
        if problem is not None:
            raise InvalidArgumentError(ErrorType.INVALID_ARGUMENT, None, problem)
        if new.proxy is None:
            raise InvalidArgumentError(ErrorType.INVALID_ARGUMENT, None, _NO_PROXY)
        proxy = PhoneProxy.model_validate(new.proxy, from_attributes=True)
        labels = dict(new.labels)
        pool = labels.get(LABEL_POOL, "")
        mark = slot_mark(pool, new.idempotency_key)
        with provider_call(pool=pool):
            # Two attempts of one slot (a retry while the first still runs) one at a time:
            # the second looks the mark up after the first's add was answered.
            async with self._slots.setdefault(mark, asyncio.Lock()):
                return await self._create(pool, mark, labels, template.region, proxy)

    async def _create(
        self, pool: str, mark: str, labels: dict[str, str], region: str, proxy: PhoneProxy
    ) -> DeviceInfo:
        # First, always: an earlier attempt whose answer was lost made it.
        listing: Listing | None = None
        if self.listings.sizes.get(pool, 0) < MAX_PAGE_SIZE:
            listing = await self.listings.pool_listing(pool)
            found = sorted(
                ((p, r) for p, r in listing.found if p.name == mark),
                key=lambda pr: oldest_first(pr[0]),
            )
        else:
            found = [
                (p, r)
                for p in await self.phones.find_by_mark(mark)
                if (r := self.listings.remark_of(p)) is not None
            ]
        mine = [(p, r) for p, r in found if r.state == ACTIVE]
        if mine:
            (phone, remark), *others = mine
            for other, other_remark in others:  # a create the server finished late
                await self.reserve.park(other, other_remark, broken=False)
            return await self._power_on(phone, remark)
        end_if_cancelled_unsent()  # nothing of an earlier attempt: a cancelled one ends here
        async with self.listings.claim_locks.setdefault(pool, asyncio.Lock()):
            end_if_cancelled_unsent()  # cancelled while it waited here: no listing, no claim
            taken = await self.reserve.claim(pool, labels, mark, proxy, listing)
        if taken is not None:
            return await self._power_on(*taken)
        remark = Remark(ACTIVE, 1, self._wall(), labels)
        phone_id = await self.phones.add(
            mark=mark,
            region_id=region,
            compute_type=self.compute_type,
            proxy=proxy,
            remark=remark.text(),
        )
        phone = Phone(
            id=phone_id,
            name=mark,
            remark=remark.text(),
            region_id=region,
            status=PhoneStatus.OFF,
        )
        return await self._power_on(phone, remark)

    async def _power_on(self, phone: Phone, remark: Remark) -> DeviceInfo:
        if phone.status not in (PhoneStatus.BOOTING, PhoneStatus.RUNNING):
            await self.phones.open(phone.id)
            self._forget(phone.id)
            phone = phone.model_copy(update={"status": PhoneStatus.BOOTING})
        return await self.reads.info(phone, remark)

    # ------------------------------------------------------------ removals

    async def remove_device(self, device_id: str) -> None:
        phone, remark = await self._serving(device_id)
        with provider_call(pool=remark.pool):
            if current_call().deleting or current_call().retiring:
                # Its pool is deleted: shut down and retired, nothing read, no fresh
                # start spent (release_pool would retire it seconds later anyway). So is
                # a phone the pool retires (maxAge, a person's `replace --when-idle`,
                # drift): parked, a create would serve it again as a new device, the same
                # profile, and a fresh start (60 a profile a month) is no new profile.
                await self.phones.shutdown(phone.id)
                await self.reserve.mark_parked(phone, remark, RETIRED, broken=False)
                return
            # Broken (fresh-started before it is kept): read so, or read now for a
            # replacement; a scale-down reads nothing more. A phone last read not running
            # is read again (docs/providers.md, "The cloud-phone adapter").
            read = current_call().replacement or self.reads.suspect(phone)
            # Used by a lease's holder: fresh-started before a later create may claim it
            # (retired if none is left this month), as a broken one is.
            broken = current_call().used or (
                phone.status == PhoneStatus.RUNNING
                and not await self.reads.running(phone, read=read)
            )
            await self.reserve.park(phone, remark, broken=broken)

    async def release_pool(self, pool: str) -> int:
        return await self.reserve.release_pool(pool)

    async def aclose(self) -> None:
        await self.phones.api.aclose()

    # ------------------------------------------------------------ plumbing

    async def _serving(self, device: str) -> tuple[Phone, Remark]:
        """The profile serving `device` now (`NotFoundError`: no such device, or one removed)."""
        parsed = parse_device_id(device)
        if parsed is not None:
            with provider_call(pool=current_call().pool or self.listings.pools.get(parsed[0], "")):
                phone = await self._phone(parsed[0])
            remark = None if phone is None else self.listings.remark_of(phone)
            if phone is not None and remark is not None and remark.serves(parsed[1]):
                return phone, remark
        raise NotFoundError(ErrorType.NOT_FOUND, None, f"no cloud phone serves device {device}")

    def _forget(self, phone_id: str) -> None:
        """What this adapter kept of a phone it just changed."""
        self.reads.forget(phone_id)
        self._looked.pop(phone_id, None)
        self.parked.forget(phone_id)  # claimed or parked here: a new grace (R24 #5)

    async def _phone(self, phone_id: str) -> Phone | None:
        """One profile by id: one call when its `seq` is known, else the managed listing;
        a look-up less than `lookup_seconds` old is answered again."""
        looked = self._looked.get(phone_id)
        if looked is not None and self._clock() - looked[0] < self.lookup_seconds:
            return looked[1]
        found = await self._look_up(phone_id)
        if found is not None:
            self._looked[phone_id] = (self._clock(), found)
        return found

    async def _look_up(self, phone_id: str) -> Phone | None:
        # A pool of one page: its listing, shared with the pool's other calls waiting
        # for the budget (a scale-down's N idle checks and removals cost one call, not
        # N look-ups by `seq`), and kept for each phone it shows.
        pool = current_call().pool
        listed = False
        if pool and self.listings.sizes.get(pool, 0) < MAX_PAGE_SIZE:
            listing = await self.listings.pool_listing(pool)
            listed = True
            if (listing.parks, listing.claims) == (
                self.listings.parks[pool],
                self.listings.claimed[pool],
            ):
                at = self._clock()  # nothing of the pool changed here since it was begun
                self._looked.update({p.id: (at, p) for p, _ in listing.found})
            if found := _with_id(phone_id, (p for p, _ in listing.found)):
                return found
        seq = self.listings.seqs.get(phone_id)
        if seq is not None:
            page = await self.phones.list_page(0, seq=seq)
            if found := _with_id(phone_id, page.items):
                return found
        # Its `seq` not known (a node worker restarted): the pool's listing (shared with
        # the pool's other calls waiting), then, if not there, every pool's profiles.
        if pool and not listed:
            if found := _with_id(phone_id, (p for p, _ in await self.listings.pool_phones(pool))):
                return found
        return _with_id(phone_id, (p for p, _ in await self.listings.marked(MARK_PREFIX)))


def _with_id(phone_id: str, phones: Iterable[Phone]) -> Phone | None:
    return next((phone for phone in phones if phone.id == phone_id), None)
