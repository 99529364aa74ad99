"""The reserve of the `bitbrowser` adapter (`phone_provider`): a create's claim, a
removal's park, and `release_pool` retiring a deleted pool's reserve profiles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from devicepool.activities.errors import QuotaExceededError
from devicepool.activities.providers.base import current_call, provider_call
from devicepool.activities.providers.bitbrowser._paging import oldest_first
from devicepool.activities.providers.bitbrowser.models import Phone, PhoneProxy
from devicepool.activities.providers.bitbrowser.phone_listings import Listing, PoolListings
from devicepool.activities.providers.bitbrowser.phone_marks import (
    ACTIVE,
    RESERVE,
    RETIRED,
    Remark,
    parked_fields,
    parked_mark,
)
from devicepool.activities.providers.bitbrowser.phones import CloudPhones
from devicepool.api.names import LABEL_TEMPLATE_HASH


class Reserve:
    """The reserve profiles of an account's pools, as `PhoneProvider` claims and parks them."""

    def __init__(
        self,
        phones: CloudPhones,
        listings: PoolListings,
        *,
        forget: Callable[[str], None],
        wall_clock: Callable[[], float],
        clock: Callable[[], float],
        held: Callable[[str], bool] = lambda phone_id: False,
    ) -> None:
        self.phones = phones
        self.listings = listings
        self._forget = forget  # what the adapter kept of a phone changed here
        self._held = held  # a profile the orphan sweep just sent a shutdown: not claimed
        self._wall = wall_clock
        self._clock = clock
        # pool -> the lock its `spec.reserve.keep` count-and-mark holds (`park`).
        self._park_locks: dict[str, asyncio.Lock] = {}
        # pool -> (when, its reserve profiles): a batch of creates lists the reserve once.
        # Claims and parks of this process keep it right; it is listed again after
        # `reserve_seconds`.
        self._reserves: dict[str, tuple[float, list[tuple[Phone, Remark]]]] = {}
        self.reserve_seconds = 10 * phones.pacer.interval
        # How long `listings.reserve_ids` counts for a removal under `spec.reserve.keep`.
        self.reserve_count_seconds = 60 * phones.pacer.interval

    async def claim(
        self,
        pool: str,
        labels: dict[str, str],
        mark: str,
        proxy: PhoneProxy,
        listing: Listing | None = None,
    ) -> tuple[Phone, Remark] | None:
        """A reserve profile of the pool and template, re-marked for this slot (or None).

        Holds the pool's claim lock. `listing`, the create's own look-up, serves when
        no claim was made since it began (one was: that profile may show as reserve)."""
        wanted = labels.get(LABEL_TEMPLATE_HASH, "")
        kept = self._reserves.get(pool)
        if kept is None or self._clock() - kept[0] >= self.reserve_seconds:
            # Under the lock no claim starts: at most one more listing is begun.
            while listing is None or listing.claims != self.listings.claimed[pool]:
                listing = await self.listings.pool_listing(pool)
            listed = [(p, r) for p, r in listing.found if r.state == RESERVE]
            kept = (self._clock(), listed)
            if listing.parks == self.listings.parks[pool]:  # no phone parked since it began
                self._reserves[pool] = kept
        reserve = [
            pr
            for pr in kept[1]
            if pr[1].labels.get(LABEL_TEMPLATE_HASH, "") == wanted and not self._held(pr[0].id)
        ]
        if not reserve:
            return None
        phone, old = min(reserve, key=lambda pr: oldest_first(pr[0]))
        kept[1].remove((phone, old))
        remark = Remark(ACTIVE, old.incarnation + 1, self._wall(), labels)
        # One partial update: a lost answer is found by the mark on the next attempt.
        try:
            await self.phones.update(
                phone.id, {"name": mark, "remark": remark.text(), **proxy.fields()}
            )
        except BaseException:
            self._reserves.pop(pool, None)  # not known what it holds now: list it again
            self.listings.reserve_ids.pop(pool, None)
            self.listings.claimed[pool] += 1  # nor whether a listing begun before shows it claimed
            raise
        self.listings.claimed[pool] += 1
        if (counted := self.listings.reserve_ids.get(pool)) is not None:
            counted[1].discard(phone.id)
        self._forget(phone.id)
        return phone.model_copy(update={"name": mark, "remark": remark.text()}), remark

    async def park(self, phone: Phone, remark: Remark, *, broken: bool) -> str:
        """Power the phone off and keep its profile: `reserve`, or `retired` if it is broken
        and cannot be fresh-started this month, or past the pool's `spec.reserve.keep`.
        Shut down first: a profile marked reserve while still on would be billed and
        listed nowhere."""
        await self.phones.shutdown(phone.id)
        keep = current_call().reserve_keep
        if keep is None:
            return await self.mark_parked(phone, remark, RESERVE, broken=broken)
        # One count-and-mark at a time per pool: a scale-down removes its devices at once.
        async with self._park_locks.setdefault(remark.pool, asyncio.Lock()):
            counted = self.listings.reserve_ids.get(remark.pool)
            if counted is not None and self._clock() - counted[0] < self.reserve_count_seconds:
                kept = len(counted[1])
            else:
                found = await self.listings.pool_phones(remark.pool)
                kept = sum(1 for _, r in found if r.state == RESERVE)
            state = RETIRED if kept >= keep else RESERVE
            return await self.mark_parked(phone, remark, state, broken=broken)

    async def mark_parked(self, phone: Phone, remark: Remark, state: str, *, broken: bool) -> str:
        if broken and state == RESERVE:
            try:
                await self.phones.recover(phone.id)
            except QuotaExceededError:
                state = RETIRED
        self._forget(phone.id)
        await self.phones.update(phone.id, parked_fields(remark, state))
        self.listings.parks[remark.pool] += 1
        self._reserves.pop(remark.pool, None)  # listed again with this one
        if (counted := self.listings.reserve_ids.get(remark.pool)) is not None:
            if state == RESERVE:
                counted[1].add(phone.id)
            else:
                counted[1].discard(phone.id)
        return state

    async def release_pool(self, pool: str) -> int:
        self._reserves.pop(pool, None)
        self.listings.reserve_ids.pop(pool, None)
        with provider_call(pool=pool):
            profiles = await self.listings.pool_phones(pool)
            kept = [(p, r) for p, r in profiles if r.state == RESERVE]
            for phone, remark in kept:
                await self.phones.update(phone.id, parked_fields(remark, RETIRED))
            # Those retired before, out of the pool's listing: one more listing, here only.
            retired = [
                p
                for p in await self.phones.find_by_mark(parked_mark(pool, RETIRED))
                if p.id not in {q.id for q, _ in profiles}
                and (r := self.listings.remark_of(p)) is not None
                and r.pool == pool
            ]
        # Every profile of the pool stays (the API has no delete), retired now: a retry
        # after a lost answer counts the same.
        return len(profiles) + len(retired)
