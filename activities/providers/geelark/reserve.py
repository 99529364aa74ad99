"""The warm reserve of the `geelark` adapter: phones kept stopped for a pool's next creates.

Only for an account served by its node worker (`GeeLarkProvider(reserve=True)`): claims
are granted by a lock in this one process, which two processes could not share. A
scale-down of a healthy phone stops it, confirms it stopped, and keeps it renamed
`dvp-<pool digest>-reserve` (the pool's name prefix: its listings see it; the remark keeps
the labels and so the template hash), at most `spec.reserve.keep` a pool (unset or 0: none).
A create claims the oldest stopped one of its pool and template hash (renamed to its slot's
mark, re-proxied, then started) before it adds a phone; reserve phones of another template
are deleted then (they can never serve), and a create refused at the plan's profile cap
(44002) deletes a reserve phone and adds again. A deleted pool's reserve is deleted
(`release`). Why and the limits: docs/providers.md, "The warm reserve on GeeLark".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from devicepool.activities.errors import NotFoundError, ProviderError
from devicepool.activities.heartbeats import end_if_cancelled_unsent
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import current_call
from devicepool.activities.providers.geelark.marks import (
    Remark,
    reserve_mark,
)
from devicepool.activities.providers.geelark.phones import (
    EXPIRED,
    SHUT_DOWN,
    STARTED,
    Phones,
    as_int,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_SLOT, LABEL_TEMPLATE_HASH

__all__ = ["PROXY_TYPE_IDS", "RESERVE_SECONDS", "Reserve", "claimable", "template_of"]

logger = logging.getLogger(__name__)

# A pool's reserve as listed serves the claims of this long (a burst of creates lists it
# once: `phone/list` is 200 a minute); every park, failed claim or delete here drops it.
RESERVE_SECONDS = 30.0
# `phone/detail/update`'s `proxyConfig.typeId`.
PROXY_TYPE_IDS = {"socks5": 1, "http": 2, "https": 3}
PROFILE_CAP = 44002

Kept = tuple[dict[str, Any], Remark]


def template_of(remark: Remark) -> str:
    """The template hash a remark records ("": none, so it serves no template)."""
    value = remark.labels.get(LABEL_TEMPLATE_HASH, "")
    return value if isinstance(value, str) else ""


def _phone_id(item: dict[str, Any]) -> str:
    phone_id = item.get("id")
    if isinstance(phone_id, str | int) and not isinstance(phone_id, bool) and phone_id != "":
        return str(phone_id)
    return ""


def claimable(item: dict[str, Any], remark: Remark | None, pool: str | None = None) -> bool:
    """A listed phone is a reserve phone a create may claim: named as a reserve, listed shut
    down (never one someone started: it bills, and its pool removes it), a devicepool remark
    of the pool with a template hash, a usable id. Nothing else of a listing is trusted."""
    if remark is None or not remark.pool or (pool is not None and remark.pool != pool):
        return False
    return (
        item.get("serialName") == reserve_mark(remark.pool)
        and as_int(item.get("status")) == SHUT_DOWN
        and bool(template_of(remark))
        and bool(_phone_id(item))
    )


def claimable_or_expired(item: dict[str, Any], pool: str) -> bool:
    """Still a stopped (or expired) reserve phone of `pool` as listed: safe to delete."""
    remark = Remark.parse(item.get("remark"))
    return (
        item.get("serialName") == reserve_mark(pool)
        and remark is not None
        and remark.pool == pool
        and as_int(item.get("status")) in (SHUT_DOWN, EXPIRED)
    )


class Reserve:
    """The reserve phones of an account's pools, as `GeeLarkProvider` claims and parks them."""

    def __init__(
        self,
        phones: Phones,
        *,
        wall_clock: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
        reserve_seconds: float = RESERVE_SECONDS,
    ) -> None:
        self.phones = phones
        self._wall, self._clock = wall_clock, clock
        self.reserve_seconds = reserve_seconds
        # pool -> one claim, park or delete at a time, and how many hold or wait for it
        # (dropped when none does: a node serves many pools in its life)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        # pool -> how many stopped phones its reserve held when last seen (a listing, then
        # each park, claim and delete here; a pool seen with none is dropped): what the
        # profile cap's freeing lists, never every pool the process has served
        self.parked: dict[str, int] = {}
        # pool -> (when listed, its claimable phones not claimed since)
        self._listed: dict[str, tuple[float, list[Kept]]] = {}
        # pool -> the template hash its last create asked for (the current one)
        self.current: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def lock(self, pool: str) -> AsyncIterator[None]:
        """The pool's claim lock, held; forgotten once nobody holds or waits for it."""
        held, users = self._locks.get(pool, (asyncio.Lock(), 0))
        self._locks[pool] = (held, users + 1)
        try:
            async with held:
                yield
        finally:
            held, users = self._locks[pool]
            if users > 1:
                self._locks[pool] = (held, users - 1)
            else:
                del self._locks[pool]

    def _count(self, pool: str, change: int) -> None:
        """`parked` moved by `change` (a park, a claim, a delete): dropped at none."""
        left = self.parked.get(pool, 0) + change
        if left > 0:
            self.parked[pool] = left
        else:
            self.parked.pop(pool, None)

    def forget(self, pool: str) -> None:
        """What was listed of the pool's reserve: listed again at the next claim."""
        self._listed.pop(pool, None)

    async def _reserve_of(self, pool: str) -> list[Kept]:
        """Every phone named as the pool's reserve with its remark, oldest first (`parked`
        set from it; until it answers the pool may hold one)."""
        mark = reserve_mark(pool)
        self.parked.setdefault(pool, 1)
        items = await self.phones.listed({"serialName": mark})
        kept = [
            (item, remark)
            for item in items
            if item.get("serialName") == mark
            and _phone_id(item)
            and (remark := Remark.parse(item.get("remark"))) is not None
            and remark.pool == pool
        ]
        self.parked.pop(pool, None)
        self._count(
            pool, sum(1 for i, _ in kept if as_int(i.get("status")) in (SHUT_DOWN, EXPIRED))
        )
        return sorted(kept, key=lambda pair: (pair[1].created, _phone_id(pair[0])))

    async def claim(
        self,
        pool: str,
        mark: str,
        labels: dict[str, str],
        template: DeviceTemplate,
        proxy: ResolvedProxy | None,
    ) -> tuple[str, Remark] | None:
        """A reserve phone of the pool and template renamed for the slot `mark` (its id and
        new remark), or None. Sheds the pool's reserve phones of another template first.
        A lost answer is found by the mark at the next attempt."""
        wanted = labels.get(LABEL_TEMPLATE_HASH, "")
        if not wanted:
            return None
        self.current[pool] = wanted
        async with self.lock(pool):
            try:
                return await self._claim(pool, mark, labels, template, proxy)
            except NotFoundError:
                # Deleted since it was listed (a person, the console): listed afresh once.
                return await self._claim(pool, mark, labels, template, proxy)

    async def _claim(
        self,
        pool: str,
        mark: str,
        labels: dict[str, str],
        template: DeviceTemplate,
        proxy: ResolvedProxy | None,
    ) -> tuple[str, Remark] | None:
        """`claim` under the pool's lock. The create's keep (`ProviderCall.claim_keep`, None:
        not told) bounds the reserve: under 1 nothing is claimed, and what is parked past
        it (with the one claimed) is deleted, the oldest kept."""
        end_if_cancelled_unsent()  # cancelled while it waited for the lock: no listing
        wanted = labels.get(LABEL_TEMPLATE_HASH, "")
        keep = current_call().claim_keep
        room = None if keep is None else (keep + 1 if keep > 0 else 0)
        listed = self._listed.get(pool)
        if (
            listed is None
            or not 0 <= self._clock() - listed[0] < self.reserve_seconds
            or (room is not None and len(listed[1]) > room)
        ):
            found = await self._reserve_of(pool)
            await self._shed(pool, [i for i, r in found if template_of(r) != wanted])
            fit = [(i, r) for i, r in found if template_of(r) == wanted and claimable(i, r, pool)]
            if room is not None and len(fit) > room:
                await self._shed(pool, [i for i, _ in fit[room:]], why="past spec.reserve.keep")
                fit = fit[:room]
            listed = (self._clock(), fit)
            self._listed[pool] = listed
        if keep is not None and keep < 1:
            return None
        kept = [(i, r) for i, r in listed[1] if template_of(r) == wanted]
        if not kept:
            return None
        item, _ = kept[0]
        listed[1].remove(kept[0])  # taken now: never handed to a second create
        phone_id = _phone_id(item)
        remark = Remark(created=self._wall(), region=template.region, labels=labels)
        named: dict[str, Any] = {"name": mark, "remark": remark.text()}
        try:
            if proxy is not None:
                # Proxy and remark first, the phone still named as a reserve; renamed last.
                # An update GeeLark applies in part (its `failDetails`) never leaves a phone
                # named for the slot with its old proxy, which a retry would start.
                password = proxy.password.get_secret_value()
                config = {
                    "typeId": PROXY_TYPE_IDS.get(proxy.type, 1),
                    "server": proxy.host,
                    "port": proxy.port,
                    "username": proxy.username,
                    "password": password,
                }
                fields = {"remark": named.pop("remark"), "proxyConfig": config}
                await self.phones.update(phone_id, fields, secrets=[password])
            await self.phones.update(phone_id, named)
        except BaseException:
            self.forget(pool)  # not known what it is now: list it again
            raise
        self._count(pool, -1)
        logger.info("GeeLark pool %s: phone %s claimed from the reserve", pool, phone_id)
        return phone_id, remark

    async def _shed(
        self, pool: str, items: list[dict[str, Any]], *, why: str = "of another template"
    ) -> None:
        """Delete reserve phones that can never serve (another template, none recorded) or
        are past the pool's keep. One listed started is left to its pool, which removes it
        as a failed device."""
        for item in items:
            phone_id = _phone_id(item)
            if as_int(item.get("status")) not in (SHUT_DOWN, EXPIRED):
                continue
            try:
                await self.phones.delete(phone_id)
            except ProviderError as exc:
                logger.info(
                    "GeeLark pool %s: reserve phone %s not shed yet: %s", pool, phone_id, exc
                )
            else:
                self._count(pool, -1)
                logger.info("GeeLark pool %s: reserve phone %s %s deleted", pool, phone_id, why)

    def may_park(self, pool: str, remark: Remark, status: int | None) -> bool:
        """A removal may keep this phone: a scale-down (not a replacement, not a retirement
        (maxAge, a person's replace, drift), not after a lease's use, not the pool's
        deletion, not the orphan sweep) of a started phone of the pool's current template,
        the pool keeping a reserve (`spec.reserve.keep` >= 1)."""
        call = current_call()
        hash_ = template_of(remark)
        return (
            bool(call.reserve_keep)
            and call.pool == pool
            and not (call.replacement or call.used or call.deleting or call.retiring)
            and status == STARTED  # started: healthy (an offline or failed phone is deleted)
            and bool(hash_)
            and self.current.get(pool, hash_) == hash_
        )

    async def park(self, pool: str, phone_id: str, remark: Remark, *, name: str) -> bool:
        """Keep a stopped phone (`Phones.stop` confirmed it), the removed device's, named
        `name` (its slot's mark), in the pool's reserve; False when the reserve holds
        `spec.reserve.keep` already (the caller deletes it, and what is parked past a
        lowered keep is deleted too, the oldest kept) or the phone runs again.

        Read again under the lock first: a second attempt of one removal may come after
        the first parked it and a claim handed it to another slot (`NotFoundError`: the
        device is gone, the phone left alone)."""
        keep = current_call().reserve_keep or 0
        async with self.lock(pool):
            again = await self.phones.one(phone_id)
            if again is None or again.get("serialName") != name:
                raise NotFoundError(
                    ErrorType.NOT_FOUND, None, f"GeeLark phone {phone_id} serves no {name} now"
                )
            if as_int(again.get("status")) not in (SHUT_DOWN, EXPIRED):
                return False  # started since its stop: deleted (refused, retried, stopped)
            found = await self._reserve_of(pool)
            if len(found) >= keep:
                if len(found) > keep:
                    self.forget(pool)
                    await self._shed(
                        pool, [i for i, _ in found[keep:]], why="past spec.reserve.keep"
                    )
                return False
            self.forget(pool)  # listed again with this one
            labels = {k: v for k, v in remark.labels.items() if k != LABEL_SLOT}
            parked = Remark(created=self._wall(), region=remark.region, labels=labels)
            await self.phones.update(
                phone_id, {"name": reserve_mark(pool), "remark": parked.text()}
            )
            self._count(pool, 1)
        logger.info("GeeLark pool %s: phone %s kept stopped in the reserve", pool, phone_id)
        return True

    async def free_one(self) -> bool:
        """Delete one stopped reserve phone of a pool last seen holding some (`parked`: the
        most first), another template's first, then the oldest, to make room under the
        plan's profile cap; False if there is none. Listed by the pool's mark, one call a
        pool until one shows a stopped phone: never the account's every phone nor every
        pool served (either, on a large account or a long-lived node, would outrun the
        create's budget and lose the 44002)."""
        parked: list[Kept] = []
        for pool in sorted(self.parked, key=lambda p: (-self.parked[p], p)):
            parked = [
                (item, remark)
                for item, remark in await self._reserve_of(pool)
                if as_int(item.get("status")) in (SHUT_DOWN, EXPIRED)
            ]
            if parked:
                break
        if not parked:
            return False

        def order(pair: Kept) -> tuple[bool, float, str]:
            item, remark = pair
            current = self.current.get(remark.pool)
            return (
                current is not None and template_of(remark) == current,
                remark.created,
                _phone_id(item),
            )

        item, remark = min(parked, key=order)
        phone_id = _phone_id(item)
        async with self.lock(remark.pool):
            self.forget(remark.pool)  # no claim holds it now; none is handed it later
            # Read again under the lock: a claim since the listing may have renamed it.
            again = await self.phones.one(phone_id)
            if again is None or not claimable_or_expired(again, remark.pool):
                return False
            await self.phones.delete(phone_id)
            self._count(remark.pool, -1)
        logger.info(
            "GeeLark pool %s: reserve phone %s deleted (the plan's profile cap)",
            remark.pool,
            phone_id,
        )
        return True

    async def release(self, pool: str) -> None:
        """Delete every reserve phone of a deleted pool (stopped first if someone started it)."""
        async with self.lock(pool):
            self.forget(pool)
            for item, _ in await self._reserve_of(pool):
                await self.phones.stop_and_delete(_phone_id(item), as_int(item.get("status")))
            self.parked.pop(pool, None)
        self.current.pop(pool, None)
