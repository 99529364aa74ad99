"""The `geelark` adapter: a DevicePool's devices as GeeLark cloud phones (`GeeLarkApi`).

One adapter per account (`api: geelark`), a `providers.Provider`. Membership is the phone's
name and remark (`marks`), never its group (a person may move a phone); a device id is
`<phone id>.<slot digest>`. A create (`creates`) first looks its slot's mark up (GeeLark has
no idempotency key), adds a phone only if none, looks again when the add got no clear
answer, and starts it (`addNew` makes a shut-down phone). Every removal stops the phone, confirms it
stopped, then deletes it (delete is refused while started), except, on an account served by
its node worker (`reserve=True`), a scale-down of a healthy phone: kept stopped in the pool's
warm reserve (`reserve`, up to `spec.reserve.keep`), which a create claims before adding.
Without a node `spec.reserve` is ignored and a phone parked in a reserve is a `failed` device
of its pool, which removes it; a removal right after `get_device` in one task (a
scale-down's idle check) acts on that read, not a second one (`REUSE_SECONDS`), unless
another removal of the phone ended since (removals of a phone run one at a time). Statuses:
0 started `ready`, 1 starting `provisioning`, 2 shut down `offline`, 3 expired `failed`.
Per-item results decide every batch call. No region list, no reset (a used phone is
replaced). Secrets (the key, proxy passwords in listings, the ADB password outside
`ConnectInfo`) never reach a result or an error. One create fits inside its activity's
attempt (`creates.ADD_BY_SECONDS`...). Why: docs/providers.md, "GeeLark's Open API".
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devicepool.activities.connect_models import ConnectInfo, parse_adb
from devicepool.activities.device_models import DeviceInfo, DeviceStatusInfo
from devicepool.activities.errors import InvalidArgumentError, NotFoundError
from devicepool.activities.providers.base import (
    NewDevice,
    ProviderDevice,
    current_call,
    provider_call,
)
from devicepool.activities.providers.geelark.api import MAX_IDS, GeeLarkApi
from devicepool.activities.providers.geelark.creates import Creates
from devicepool.activities.providers.geelark.errors import GeeLarkServerError, GeeLarkStateError
from devicepool.activities.providers.geelark.marks import (
    RESERVE_DIGEST,
    Remark,
    device_id,
    name_digest,
    parse_device_id,
    pool_prefix,
    reserve_mark,
)
from devicepool.activities.providers.geelark.phones import SHUT_DOWN, Phones, as_int
from devicepool.activities.providers.geelark.reserve import Reserve, claimable
from devicepool.activities.providers.geelark.words import parked_status, phone_status
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_SLOT

__all__ = ["ANDROID_ONLY", "GeeLarkProvider"]

logger = logging.getLogger(__name__)

ANDROID_ONLY = "GeeLark has Android cloud phones only"
PROXY_TYPES = ("socks5", "http", "https")
# A removal acts on the read `get_device` made at most this long before (`api.clock`), in
# the same task (an activity runs in a task of its own), of the same device: a scale-down's
# idle check reads its phone, then removes it at once, with no second `phone/list` to wait
# its pacer's turn for (docs/providers.md, "GeeLark's Open API", the remove row).
REUSE_SECONDS = 5.0


@dataclass(frozen=True)
class _Read:
    """What `get_device` read last in this task: of which adapter, device, phone, when."""

    provider: GeeLarkProvider
    device: str
    phone_id: str
    item: dict[str, Any]
    at: float
    tick: int  # `GeeLarkProvider._ticks`: before any removal of the phone ending later


_last_read: ContextVar[_Read | None] = ContextVar("geelark_last_read", default=None)


class GeeLarkProvider:
    """One GeeLark account's cloud phones as a DevicePool's devices (a `providers.Provider`)."""

    def __init__(
        self,
        api: GeeLarkApi,
        *,
        confirm_tries: int = 5,
        confirm_seconds: float = 2.0,
        adb_wait_seconds: float = 3.0,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        reserve: bool = False,
    ) -> None:
        self.api = api
        self.phones = Phones(
            api, confirm_tries=confirm_tries, confirm_seconds=confirm_seconds, sleep=sleep
        )
        # The warm reserve: only where this process is the account's one (its node worker),
        # so that its claim lock grants every claim (`reserve`). None: every removal deletes.
        self.reserve = Reserve(self.phones, wall_clock=wall_clock) if reserve else None
        self.adb_wait_seconds = adb_wait_seconds
        self._sleep = sleep
        self._creates = Creates(
            api, self.phones, self.reserve, view=self._view, wall_clock=wall_clock
        )
        # One removal of a phone at a time in this process (phone id -> lock, users), and
        # when (tick, `api.clock`) one last ended: a read from before that is stale.
        self._ticks = itertools.count()
        self._removing: dict[str, tuple[asyncio.Lock, int]] = {}
        self._ended: dict[str, tuple[int, float]] = {}

    def __repr__(self) -> str:
        return f"GeeLarkProvider({self.api!r})"

    # ------------------------------------------------------------ reads

    def _view(self, item: dict[str, Any], *, pool: str | None = None) -> DeviceInfo | None:
        """The device a listed phone is, if it serves a slot of a pool devicepool manages (of
        `pool`, when given). Built field by field: nothing else of the item (its proxy's
        password) goes on."""
        name, phone_id = item.get("serialName"), item.get("id")
        digest = name_digest(name)
        if digest is None or not isinstance(name, str):
            return None
        if not isinstance(phone_id, str | int) or isinstance(phone_id, bool) or phone_id == "":
            return None
        remark = Remark.parse(item.get("remark"))
        if remark is None or not remark.pool or not name.startswith(pool_prefix(remark.pool)):
            return None
        if pool is not None and remark.pool != pool:
            return None
        if (
            digest == RESERVE_DIGEST
            and self.reserve is not None
            and claimable(item, remark)
            and not current_call().sweeping
        ):
            # Kept stopped in the reserve: no device of its pool, nor counted for a spendCap;
            # the orphan sweep sees it (a `failed` device), so a pool gone leaves none.
            return None
        status, reason = phone_status(item.get("status"))
        rpa = item.get("rpaStatus")
        created = remark.created if math.isfinite(remark.created) else 0.0
        labels = dict(remark.labels)
        if digest == RESERVE_DIGEST:
            labels.pop(LABEL_SLOT, None)  # parked by an earlier build: it serves no slot
        status, reason = parked_status(digest, status, reason)
        return DeviceInfo(
            id=device_id(str(phone_id), digest),
            status=status,
            region=remark.region,
            created_at=datetime.fromtimestamp(min(created, 4e9), UTC),
            reason=reason,
            # An RPA task running (a value GeeLark documents none of: any but 0 counts)
            # keeps the phone from a scale-down.
            session_active=rpa not in (None, 0, "0", ""),
            labels=labels,
        )

    async def list_pool(self, pool: str) -> list[DeviceInfo]:
        # By the name's pool prefix (`Phones.named`: whichever way `serialName` matches),
        # never by the group: a person can move a phone to another group, and it runs and
        # bills there all the same. `_view` keeps only what the name and the remark both say
        # is the pool's.
        with provider_call(pool=pool):
            items = await self.phones.named(pool_prefix(pool))
        return [info for item in items if (info := self._view(item, pool=pool)) is not None]

    async def list_managed(self) -> list[ProviderDevice]:
        # Unfiltered: a phone untagged by hand is still found.
        items = await self.phones.listed({})
        return [ProviderDevice(info, "android") for i in items if (info := self._view(i))]

    async def _one(self, device: str) -> tuple[str, dict[str, Any], DeviceInfo]:
        """(phone id, listed item, device) of a device serving now (else `NotFoundError`)."""
        parsed = parse_device_id(device)
        item = None if parsed is None else await self.phones.one(parsed[0])
        info = None if item is None else self._view(item)
        if parsed is None or item is None or info is None or info.id != device:
            raise NotFoundError(ErrorType.NOT_FOUND, None, f"no GeeLark phone serves {device}")
        return parsed[0], item, info

    async def get_device(self, device_id: str) -> ProviderDevice:
        _last_read.set(None)
        phone_id, item, info = await self._one(device_id)
        read = _Read(self, device_id, phone_id, item, self.api.clock(), next(self._ticks))
        _last_read.set(read)
        return ProviderDevice(info, "android")

    def _just_read(self, device_id: str) -> tuple[str, dict[str, Any]] | None:
        """(phone id, listed item) of `device_id` as this task's last `get_device` read it,
        if within `REUSE_SECONDS`; once. Safe to act on: the read that decided the removal
        is the one a second would repeat, and the removal asks the provider again where it
        matters: the stop answers per item (42001: gone), its confirmation reads the status,
        and the delete is refused while the phone runs."""
        read = _last_read.get()
        _last_read.set(None)
        if read is None or read.provider is not self or read.device != device_id:
            return None
        if not 0 <= self.api.clock() - read.at <= REUSE_SECONDS:
            return None
        ended = self._ended.get(read.phone_id)
        if ended is not None and ended[0] > read.tick:
            # Another removal of the phone (an earlier attempt of this one) ended since: it
            # may have parked the phone and a claim given it to another slot. Read afresh.
            return None
        return read.phone_id, read.item

    async def read_statuses(self, ids: list[str]) -> tuple[list[DeviceStatusInfo], list[str]]:
        items: list[DeviceStatusInfo] = []
        not_found = [i for i in ids if parse_device_id(i) is None]
        wanted: dict[str, list[tuple[str, str]]] = {}  # phone id -> (device id, digest)
        for device in ids:
            if (parsed := parse_device_id(device)) is not None:
                wanted.setdefault(parsed[0], []).append((device, parsed[1]))
        phone_ids = list(wanted)
        for start in range(0, len(phone_ids), MAX_IDS):
            chunk = phone_ids[start : start + MAX_IDS]
            batch = await self.api.batch("phone/status", chunk)
            if batch.unknown:
                raise GeeLarkServerError(
                    ErrorType.SERVER_ERROR,
                    200,
                    f"phone/status: no answer for {len(batch.unknown)} of {len(chunk)} phones",
                )
            for phone_id, error in batch.failed.items():
                if isinstance(error, NotFoundError):
                    not_found += [d for d, _ in wanted[phone_id]]
                else:  # read nothing of it: no verdict (the vendor documents only 42001)
                    logger.info("GeeLark phone %s: status not read: %s", phone_id, error)
            for phone_id, item in batch.done.items():
                name = item.get("serialName")
                status, reason = phone_status(item.get("status"))
                for device, digest in wanted[phone_id]:
                    # Named for another slot: that device is gone. (No name in the answer:
                    # the status is taken as it is.)
                    if isinstance(name, str) and name_digest(name) != digest:
                        not_found.append(device)
                    else:
                        shown, why = parked_status(digest, status, reason)
                        items.append(DeviceStatusInfo(id=device, status=shown, reason=why))
        return items, not_found

    async def connect_info(self, device_id: str) -> ConnectInfo:
        """The phone's ADB login from `adb/getData`, ADB switched on (`adb/setStatus`) first
        if it is off, then read again after `adb_wait_seconds` (GeeLark enables it
        asynchronously, some 3 s)."""
        phone_id, _, _ = await self._one(device_id)
        for attempt in range(3):
            try:
                data = await self.api.call("adb/getData", {"ids": [phone_id]})
            except GeeLarkStateError as exc:  # the whole call refused, not its item
                data = {"items": [{"id": phone_id, "code": exc.code}]}
            items = data.get("items") if isinstance(data, dict) else None
            item = next(
                (
                    i
                    for i in (items if isinstance(items, list) else [])
                    if isinstance(i, dict) and str(i.get("id")) == phone_id
                ),
                None,
            )
            code = as_int(item.get("code")) if item is not None else None
            if item is not None and code in (0, None):
                login = parse_adb(
                    {"ip": item.get("ip"), "port": item.get("port"), "code": item.get("pwd")}
                )
                if login is not None:
                    return ConnectInfo(adb=login)
            if code == 42002:
                return ConnectInfo(message=f"GeeLark phone {device_id} is not running")
            if code == 49002:
                return ConnectInfo(message=f"GeeLark phone {device_id}: its model has no ADB")
            if attempt == 0:
                await self.api.call("adb/setStatus", {"ids": [phone_id], "open": True})
            if attempt < 2:
                await self._sleep(self.adb_wait_seconds)
        return ConnectInfo(message=f"GeeLark phone {device_id}: no ADB login yet; ask again")

    async def reset_device(self, device_id: str) -> bool:
        # `/open/v2/phone/newOne` gives a new identity, but GeeLark does not say it clears
        # apps and data: read safely, there is no reset and a used phone is replaced.
        return False

    async def region_status(self, region: str) -> str:
        return "unknown"  # the Open API says nothing of a region's health

    async def region_names(self) -> list[str]:
        return []  # no region list (addNew takes `cn`, `sgp`, `us`): not checked

    def platform_problem(self, platform: str) -> str | None:
        return None if platform == "android" else f"platform {platform}: {ANDROID_ONLY}"

    def proxy_problem(self, proxy: ProxyPoolSettings | None) -> str | None:
        if proxy is not None and proxy.type not in PROXY_TYPES:
            return f"proxy pool {proxy.name!r}: GeeLark takes {', '.join(PROXY_TYPES)} proxies"
        return None

    # ------------------------------------------------------------ create

    async def create_device(self, new: NewDevice) -> DeviceInfo:
        problem = self.platform_problem(str(new.template.platform))
        if problem is not None:
            raise InvalidArgumentError(ErrorType.INVALID_ARGUMENT, None, problem)
        return await self._creates.create(new)

    # ------------------------------------------------------------ removals

    @asynccontextmanager
    async def _removal(self, device_id: str) -> AsyncIterator[None]:
        """One removal of the device's phone at a time in this process: a second attempt
        of one removal (the first timed out, still running) waits for the first, and acts
        on a read made after it ended (`_just_read`), never on one made before: the first
        may have parked the phone and a claim given it to another slot, which a stop on the
        old read would take offline."""
        parsed = parse_device_id(device_id)
        phone_id = "" if parsed is None else parsed[0]
        lock, users = self._removing.get(phone_id, (asyncio.Lock(), 0))
        self._removing[phone_id] = (lock, users + 1)
        try:
            async with lock:
                try:
                    yield
                finally:
                    now = self.api.clock()
                    self._ended = {
                        k: v for k, v in self._ended.items() if now - v[1] <= REUSE_SECONDS
                    }
                    self._ended[phone_id] = (next(self._ticks), now)
        finally:
            lock, users = self._removing[phone_id]
            if users > 1:
                self._removing[phone_id] = (lock, users - 1)
            else:
                del self._removing[phone_id]

    async def remove_device(self, device_id: str) -> None:
        async with self._removal(device_id):
            await self._remove(device_id)

    async def _remove(self, device_id: str) -> None:
        # Without a reserve, any removal, a scale-down too, deletes.
        read = self._just_read(device_id)
        phone_id, item = read if read is not None else (await self._one(device_id))[:2]
        status = as_int(item.get("status"))
        remark = Remark.parse(item.get("remark"))
        if self.reserve is not None and remark is not None:
            pool = remark.pool
            if device_id.endswith(f".{RESERVE_DIGEST}"):
                # A reserve phone that cannot serve (started, no template): deleted as read
                # afresh under the claim lock, never while a claim may rename it.
                async with self.reserve.lock(pool):
                    self.reserve.forget(pool)
                    phone_id, item, _ = await self._one(device_id)
                    await self.phones.stop_and_delete(phone_id, as_int(item.get("status")))
                return
            if self.reserve.may_park(pool, remark, status):
                await self.phones.stop(phone_id)  # confirmed stopped before it is kept
                name = str(item.get("serialName"))
                if await self.reserve.park(pool, phone_id, remark, name=name):
                    return
                status = SHUT_DOWN
        await self.phones.stop_and_delete(phone_id, status)

    async def release_pool(self, pool: str) -> int:
        """Delete the deleted pool's reserve (its listing shows none kept stopped, so this
        finds any only if one was parked since): nothing is kept."""
        if self.reserve is not None:
            with provider_call(pool=pool):
                await self.reserve.release(pool)
            return 0
        with provider_call(pool=pool):
            items = await self.phones.listed({"serialName": reserve_mark(pool)})
        for item in items:
            info = self._view(item, pool=pool)
            if info is not None and item.get("serialName") == reserve_mark(pool):
                phone_id = str(item.get("id"))
                await self.phones.stop_and_delete(phone_id, as_int(item.get("status")))
        return 0

    async def aclose(self) -> None:
        await self.api.aclose()
