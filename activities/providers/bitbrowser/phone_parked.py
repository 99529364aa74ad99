"""Reserve profiles left powered: found by the orphan sweep's managed listing, shut down again.

A removal sends `/phone/shutdown` and marks the profile reserve or retired at once,
never waiting (the vendor's power calls are asynchronous). A shutdown accepted and not
carried out would leave the phone billing under that mark. `ParkedPower` remembers the
reserve profiles the managed listing showed powered (booting, running or suspended: each
bills), and `shut_down` sends a shutdown again to those first seen so at least
`grace_seconds` before (an earlier sweep: a shutdown in flight is not doubled), at most
`limit` a sweep and none started past the sweep's budget, each re-read right before (a
create may have claimed it since), and held from claims for the grace after (`holds`: a
claim would get it listed running, send it no power-on, and lose it to that shutdown). A
claim or park of this process forgets a phone's sighting (`forget`): a new removal's
shutdown gets a grace of its own. One phone's failed re-read or shutdown is logged and
passed over; it goes after the others next time.

Retired profiles are not listed (there is no delete: that listing only grows): a retired
phone whose shutdown was lost bills on, a known gap. Why: docs/providers.md, "The
cloud-phone adapter".
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable

from devicepool.activities.errors import ProviderError
from devicepool.activities.providers.base import ParkedShutdown
from devicepool.activities.providers.bitbrowser.models import Phone, PhoneStatus
from devicepool.activities.providers.bitbrowser.phone_listings import PoolListings
from devicepool.activities.providers.bitbrowser.phone_marks import (
    RESERVE,
    Remark,
    parked_mark,
)
from devicepool.activities.providers.bitbrowser.phones import CloudPhones

__all__ = ["POWERED", "ParkedPower", "powered"]

logger = logging.getLogger(__name__)

# What a `/phone/list` status bills as (temporary compute): suspended too (the vendor:
# "continue running on the cloud and continue to be billed").
POWERED = frozenset({PhoneStatus.BOOTING, PhoneStatus.RUNNING, PhoneStatus.SUSPENDED})
# Shutdowns sent again at most per sweep: each is two turns of the account's 1 call a
# second (the re-read, the shutdown); the sweep's budget bounds the time (R24 #3).
PARKED_SHUTDOWNS_PER_SWEEP = 10
# How long a parked profile is seen powered before its shutdown is sent again: two
# boots' worth (the vendor documents about 60 s for a boot, nothing for a shutdown).
PARKED_GRACE_SECONDS = 120.0


def powered(phone: Phone) -> bool:
    return phone.status in POWERED


class ParkedPower:
    """An adapter's parked profiles seen powered, and their shutdowns sent again."""

    def __init__(
        self, phones: CloudPhones, listings: PoolListings, *, clock: Callable[[], float]
    ) -> None:
        self.phones = phones
        self.listings = listings
        self._clock = clock
        self.grace_seconds = PARKED_GRACE_SECONDS
        self.limit = PARKED_SHUTDOWNS_PER_SWEEP
        # phone id -> (when a listing first showed it parked and powered, its pool);
        # forgotten when one shows it off, or serving again
        self.seen: dict[str, tuple[float, str]] = {}
        # phones listed with no seq, said once each (the vendor documents `seq`)
        self._no_seq: set[str] = set()
        # phone id -> when this sweep last sent it a shutdown: no claim takes it for
        # `grace_seconds` (`holds`), or the shutdown would land on the slot it then serves
        self.sent_at: dict[str, float] = {}

    def observe(self, found: Iterable[tuple[Phone, Remark]]) -> None:
        """What the managed listing showed of the reserve profiles in it."""
        now = self._clock()
        for phone, remark in found:
            if remark.state == RESERVE and powered(phone):
                self.seen.setdefault(phone.id, (now, remark.pool))
            else:
                self.seen.pop(phone.id, None)

    def holds(self, phone_id: str) -> bool:
        """A shutdown this sweep sent it may not have landed yet: not to be claimed (R25 #1)."""
        at = self.sent_at.get(phone_id)
        if at is not None and self._clock() - at >= self.grace_seconds:
            del self.sent_at[phone_id]
            at = None
        return at is not None

    def forget(self, phone_id: str) -> None:
        """This process claimed or parked it: a later sighting starts a grace of its own."""
        self.seen.pop(phone_id, None)

    async def shut_down(
        self, budget_seconds: float = math.inf, sent: list[ParkedShutdown] | None = None
    ) -> list[ParkedShutdown]:
        """Send a shutdown again to those due (module docstring), none started once
        `budget_seconds` have passed; each sent is appended to `sent` at once (a caller
        that cancels the pass still knows them)."""
        started = self._clock()
        due = sorted(
            (at, phone_id, pool)
            for phone_id, (at, pool) in self.seen.items()
            if started - at >= self.grace_seconds
        )
        done: list[ParkedShutdown] = [] if sent is None else sent
        for _, phone_id, pool in due[: self.limit]:
            if self._clock() - started >= budget_seconds:
                break  # the rest wait for the next sweep, still due, oldest first
            try:
                shut = await self._again(phone_id, pool)
            except ProviderError as exc:
                # Its turn starts over, after the others': a refusal that lasts blocks no one.
                self.seen[phone_id] = (self._clock(), pool)
                logger.warning(
                    "parked cloud phone %s of pool %s: not shut down again this sweep (%s)",
                    phone_id,
                    pool,
                    exc.error_type.value,
                )
                continue
            if shut is not None:
                done.append(shut)
        return done

    async def _again(self, phone_id: str, pool: str) -> ParkedShutdown | None:
        seq = self.listings.seqs.get(phone_id)
        if seq is None:
            self.seen.pop(phone_id, None)
            if phone_id not in self._no_seq:
                self._no_seq.add(phone_id)
                logger.warning(
                    "parked cloud phone %s of pool %s: listed powered with no seq, "
                    "not shut down again (said once)",
                    phone_id,
                    pool,
                )
            return None
        # Re-read under the pool's claim lock (a claim of this process takes its turn
        # after): a create may have claimed it since the listing.
        async with self.listings.claim_locks.setdefault(pool, asyncio.Lock()):
            page = await self.phones.list_page(0, seq=seq)
            phone = next((p for p in page.items if p.id == phone_id), None)
            remark = None if phone is None else self.listings.remark_of(phone)
            if (
                phone is None
                or remark is None
                or remark.state != RESERVE
                or phone.name != parked_mark(remark.pool, remark.state)
                or not powered(phone)
            ):
                self.seen.pop(phone_id, None)  # claimed, retired, shut down since, or gone
                return None
            # Held from claims before it is sent: a create waiting on the lock comes after.
            self.sent_at[phone_id] = self._clock()
            await self.phones.shutdown(phone.id)
        self.seen[phone_id] = (self._clock(), pool)  # its grace starts over
        return ParkedShutdown(phone.id, remark.pool, remark.state, phone.status)
