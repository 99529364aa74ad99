"""The warm reserve of the `geelark` adapter: phones kept stopped for a pool's next creates.

A scale-down parks its phone (stopped, renamed `dvp-<pool digest>-reserve`, its labels kept
in the remark) instead of deleting it, as many as the pool's `spec.reserve.keep` (unset:
every one); a create claims one of the same pool and template hash (renamed to its slot's
mark, its proxy set anew) before it adds a phone, so a scale-up spends no daily create
quota. A stopped phone is not billed per minute. A deleted pool's reserve is deleted
(`release`). Claims and parks are one at a time per pool in this process only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import current_call
from devicepool.activities.providers.geelark.marks import (
    Remark,
    pool_group,
    reserve_mark,
)
from devicepool.activities.providers.geelark.phones import EXPIRED, SHUT_DOWN, Phones, as_int
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.names import LABEL_TEMPLATE_HASH

__all__ = ["PROXY_TYPE_IDS", "Reserve"]

# A pool's reserve as listed serves the creates of this long (a burst of creates lists it
# once, not once each: `phone/list` is 200 a minute); a park or a failed claim here drops it.
RESERVE_SECONDS = 30.0
# `phone/detail/update`'s `proxyConfig.typeId`.
PROXY_TYPE_IDS = {"socks5": 1, "http": 2, "https": 3}


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
        self._locks: dict[str, asyncio.Lock] = {}  # pool -> one claim or park at a time
        # pool -> (when listed, its reserve phones not claimed since)
        self._listed: dict[str, tuple[float, list[tuple[dict[str, Any], Remark]]]] = {}

    async def _kept(self, pool: str) -> list[tuple[dict[str, Any], Remark]]:
        """The pool's reserve phones, oldest first (its group, named as its reserve)."""
        mark = reserve_mark(pool)
        items = await self.phones.listed({"groupName": pool_group(pool), "serialName": mark})
        kept = [
            (item, remark)
            for item in items
            if item.get("serialName") == mark
            and str(item.get("id") or "")
            and (remark := Remark.parse(item.get("remark"))) is not None
            and remark.pool == pool
        ]
        return sorted(kept, key=lambda pair: (pair[1].created, str(pair[0].get("id"))))

    async def claim(
        self,
        pool: str,
        mark: str,
        labels: dict[str, str],
        template: DeviceTemplate,
        proxy: ResolvedProxy | None,
    ) -> tuple[str, int | None, Remark] | None:
        """A reserve phone of the pool and template, renamed for the slot `mark`: (its id, its
        status, its new remark), or None. A lost answer is found by the mark next attempt."""
        wanted = labels.get(LABEL_TEMPLATE_HASH, "")
        async with self._locks.setdefault(pool, asyncio.Lock()):
            listed = self._listed.get(pool)
            if listed is None or self._clock() - listed[0] >= self.reserve_seconds:
                listed = (self._clock(), await self._kept(pool))
                self._listed[pool] = listed
            kept = [
                (item, remark)
                for item, remark in listed[1]
                if remark.labels.get(LABEL_TEMPLATE_HASH, "") == wanted
                and as_int(item.get("status")) != EXPIRED
            ]
            if not kept:
                return None
            item, _ = kept[0]
            # Taken out now: if the update below fails, it is listed again next time.
            listed[1].remove(kept[0])
            phone_id = str(item["id"])
            remark = Remark(created=self._wall(), region=template.region, labels=labels)
            fields: dict[str, Any] = {"name": mark, "remark": remark.text()}
            secrets: list[str] = []
            if proxy is not None:
                password = proxy.password.get_secret_value()
                fields["proxyConfig"] = {
                    "typeId": PROXY_TYPE_IDS.get(proxy.type, 1),
                    "server": proxy.host,
                    "port": proxy.port,
                    "username": proxy.username,
                    "password": password,
                }
                secrets = [password]
            try:
                await self.phones.update(phone_id, fields, secrets=secrets)
            except BaseException:
                self._listed.pop(pool, None)  # not known what it is now: list it again
                raise
            return phone_id, as_int(item.get("status")), remark

    async def park(self, pool: str, phone_id: str, remark: Remark, status: int | None) -> bool:
        """Stop the phone and keep it in the pool's reserve; False (stopped, not kept) when
        the reserve holds `spec.reserve.keep` already: the caller deletes it."""
        if status != SHUT_DOWN:
            await self.phones.stop(phone_id)
        keep = current_call().reserve_keep
        async with self._locks.setdefault(pool, asyncio.Lock()):
            if keep is not None and len(await self._kept(pool)) >= keep:
                return False
            self._listed.pop(pool, None)  # listed again with this one
            parked = Remark(created=self._wall(), region=remark.region, labels=remark.labels)
            await self.phones.update(
                phone_id, {"name": reserve_mark(pool), "remark": parked.text()}
            )
        return True

    async def release(self, pool: str) -> None:
        """Delete every reserve phone of a deleted pool (stopped first if someone started it)."""
        async with self._locks.setdefault(pool, asyncio.Lock()):
            self._listed.pop(pool, None)
            for item, _ in await self._kept(pool):
                await self.phones.stop_and_delete(str(item["id"]), as_int(item.get("status")))
