"""The `geelark` adapter: a DevicePool's devices as GeeLark cloud phones (`GeeLarkApi`).

One adapter per account (`api: geelark`), a `providers.Provider`. Membership is the phone's
name, group and remark (`marks`); a device id is the phone's id. A create first looks its
slot's mark up (GeeLark has no idempotency key), adds a phone only if none has it, looks
again when the add got no clear answer, and starts it (`addNew` makes a shut-down phone). A
removal stops a started phone, confirms it stopped, then deletes it (delete is refused while
started). Statuses: 0 started `ready`, 1 starting `provisioning`, 2 shut down `offline`, 3
expired `failed`. Per-item results decide every batch call. No region list, no reset (a used
phone is replaced). Secrets (the key, proxy passwords in listings, the ADB password outside
`ConnectInfo`) never reach a result or an error. Why: docs/providers.md, "GeeLark's Open API".
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote
from weakref import WeakValueDictionary

from devicepool.activities.connect_models import ConnectInfo, parse_adb
from devicepool.activities.device_models import (
    FAILED,
    OFFLINE,
    PROVISIONING,
    READY,
    DeviceInfo,
    DeviceStatusInfo,
)
from devicepool.activities.errors import (
    InvalidArgumentError,
    NotFoundError,
    ProviderError,
    ServerError,
    TransportError,
)
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, ProviderDevice, provider_call
from devicepool.activities.providers.geelark.api import MAX_IDS, GeeLarkApi
from devicepool.activities.providers.geelark.errors import GeeLarkServerError, GeeLarkStateError
from devicepool.activities.providers.geelark.marks import (
    MANAGED_TAG,
    MARK_PREFIX,
    Remark,
    pool_group,
    pool_prefix,
    slot_mark,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_POOL

__all__ = ["ANDROID_ONLY", "MAX_PAGES", "GeeLarkProvider"]

logger = logging.getLogger(__name__)

ANDROID_ONLY = "GeeLark has Android cloud phones only"
# A listing longer than this many pages of 100 is refused, not cut: a pool that sees part
# of its phones would rent more.
MAX_PAGES = 200
PROXY_TYPES = ("socks5", "http", "https")
# `phone/status`: 0 started, 1 starting, 2 shut down, 3 expired (`phone/list`: 0..2).
_STATUSES = {0: READY, 1: PROVISIONING, 2: OFFLINE, 3: FAILED}
_REASONS = {2: "shut down at the provider", 3: "expired at the provider"}
STARTED, STARTING, SHUT_DOWN, EXPIRED = 0, 1, 2, 3
ALREADY_ON = frozenset({43009, 43010})  # start: already started / starting


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _status(value: Any) -> tuple[str, str | None]:
    code = _int(value)
    if code in _STATUSES:
        return _STATUSES[code], _REASONS.get(code)
    return OFFLINE, f"status {str(value)[:20]!r} unknown to devicepool"


def mobile_type(os_version: str) -> str:
    """`addNew`'s `mobileType` ("Android 9".."Android 15") from the pool's `osVersion`."""
    text = os_version.strip()
    if text.lower().startswith("android"):
        text = text[len("android") :].strip()
    return f"Android {text}"


def proxy_information(proxy: ResolvedProxy) -> str:
    """`type://user:password@host:port`, user and password URL-encoded."""
    secret = quote(proxy.password.get_secret_value(), safe="")
    return f"{proxy.type}://{quote(proxy.username, safe='')}:{secret}@{proxy.host}:{proxy.port}"


class GeeLarkProvider:
    """One GeeLark account's cloud phones as a DevicePool's devices (a `providers.Provider`)."""

    def __init__(
        self,
        api: GeeLarkApi,
        *,
        charge_mode: int = 0,
        confirm_tries: int = 5,
        confirm_seconds: float = 2.0,
        adb_wait_seconds: float = 3.0,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.charge_mode = charge_mode  # 0 per-minute (billed while started), 1 monthly
        self.confirm_tries, self.confirm_seconds = confirm_tries, confirm_seconds
        self.adb_wait_seconds = adb_wait_seconds
        self._wall = wall_clock
        self._sleep = sleep
        # slot mark -> the lock one create of that slot holds at a time
        self._slots: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    def __repr__(self) -> str:
        return f"GeeLarkProvider({self.api!r})"

    # ------------------------------------------------------------ reads

    def _view(self, item: dict[str, Any], *, pool: str | None = None) -> DeviceInfo | None:
        """The device a listed phone is, if devicepool manages it (of `pool`, when given).

        Built field by field: nothing else of the item (its proxy's password) goes on."""
        name, phone_id = item.get("serialName"), item.get("id")
        if not isinstance(name, str) or not name.startswith(MARK_PREFIX):
            return None
        if not isinstance(phone_id, str | int) or isinstance(phone_id, bool) or phone_id == "":
            return None
        remark = Remark.parse(item.get("remark"))
        if remark is None or not remark.pool or not name.startswith(pool_prefix(remark.pool)):
            return None
        if pool is not None and remark.pool != pool:
            return None
        status, reason = _status(item.get("status"))
        rpa = item.get("rpaStatus")
        created = remark.created if math.isfinite(remark.created) else 0.0
        return DeviceInfo(
            id=str(phone_id),
            status=status,
            region=remark.region,
            created_at=datetime.fromtimestamp(min(created, 4e9), UTC),
            reason=reason,
            # An RPA task running (a value GeeLark documents none of: any but 0 counts)
            # keeps the phone from a scale-down.
            session_active=rpa not in (None, 0, "0", ""),
            labels=dict(remark.labels),
        )

    async def _list(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every phone `phone/list` answers for `filters`, page by page until a short page;
        listed again once if the total moved while paging (an item may have shifted)."""
        for _ in range(2):
            items, totals = await self._pages(filters)
            if len(set(totals)) <= 1:
                break
        seen: dict[str, dict[str, Any]] = {}
        for item in items:
            seen.setdefault(str(item.get("id")), item)
        return list(seen.values())

    async def _pages(self, filters: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
        items: list[dict[str, Any]] = []
        totals: list[Any] = []
        for page in range(1, MAX_PAGES + 1):
            data = await self.api.call("phone/list", {**filters, "page": page, "pageSize": MAX_IDS})
            if not isinstance(data, dict):
                raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/list: no data")
            got = [i for i in data.get("items") or [] if isinstance(i, dict)]
            items += got
            totals.append(data.get("total"))
            # Never stopped early by `total`: one that under-counts would hide phones.
            if len(got) < MAX_IDS:
                return items, totals
        raise GeeLarkServerError(
            ErrorType.SERVER_ERROR, 200, f"phone/list: more than {MAX_PAGES} pages; not read"
        )

    async def list_pool(self, pool: str) -> list[DeviceInfo]:
        with provider_call(pool=pool):
            items = await self._list({"groupName": pool_group(pool)})
        return [info for item in items if (info := self._view(item, pool=pool)) is not None]

    async def list_managed(self) -> list[ProviderDevice]:
        # Unfiltered: a phone moved out of its group or untagged by hand is still found.
        items = await self._list({})
        return [ProviderDevice(info, "android") for i in items if (info := self._view(i))]

    async def _one(self, device_id: str) -> tuple[dict[str, Any], DeviceInfo]:
        data = await self.api.call("phone/list", {"ids": [device_id], "page": 1, "pageSize": 1})
        items = data.get("items") if isinstance(data, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and str(item.get("id")) == device_id:
                if (info := self._view(item)) is not None:
                    return item, info
        raise NotFoundError(ErrorType.NOT_FOUND, None, f"no managed GeeLark phone {device_id}")

    async def get_device(self, device_id: str) -> ProviderDevice:
        return ProviderDevice((await self._one(device_id))[1], "android")

    async def read_statuses(self, ids: list[str]) -> tuple[list[DeviceStatusInfo], list[str]]:
        items: list[DeviceStatusInfo] = []
        not_found: list[str] = []
        for start in range(0, len(ids), MAX_IDS):
            chunk = ids[start : start + MAX_IDS]
            batch = await self.api.batch("phone/status", chunk)
            for device_id, error in batch.failed.items():
                if isinstance(error, NotFoundError):
                    not_found.append(device_id)
                else:  # read nothing of it: no verdict (the vendor documents only 42001)
                    logger.info("GeeLark phone %s: status not read: %s", device_id, error)
            if batch.unknown:
                raise GeeLarkServerError(
                    ErrorType.SERVER_ERROR,
                    200,
                    f"phone/status: no answer for {len(batch.unknown)} of {len(chunk)} phones",
                )
            for device_id, item in batch.done.items():
                status, reason = _status(item.get("status"))
                items.append(DeviceStatusInfo(id=device_id, status=status, reason=reason))
        return items, not_found

    async def connect_info(self, device_id: str) -> ConnectInfo:
        """The phone's ADB login from `adb/getData`, ADB switched on (`adb/setStatus`) first
        if it is off, then read again after `adb_wait_seconds` (GeeLark enables it
        asynchronously, some 3 s)."""
        await self._one(device_id)
        for attempt in range(3):
            try:
                data = await self.api.call("adb/getData", {"ids": [device_id]})
            except GeeLarkStateError as exc:  # the whole call refused, not its item
                data = {"items": [{"id": device_id, "code": exc.code}]}
            items = data.get("items") if isinstance(data, dict) else None
            item = next(
                (
                    i
                    for i in (items if isinstance(items, list) else [])
                    if isinstance(i, dict) and str(i.get("id")) == device_id
                ),
                None,
            )
            code = _int(item.get("code")) if item is not None else None
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
                await self.api.call("adb/setStatus", {"ids": [device_id], "open": True})
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
        labels = dict(new.labels)
        pool = labels.get(LABEL_POOL, "")
        if not pool:
            raise InvalidArgumentError(ErrorType.INVALID_ARGUMENT, None, "a device needs a pool")
        mark = slot_mark(pool, new.idempotency_key)
        with provider_call(pool=pool):
            # Two attempts of one slot one at a time: the second looks the mark up after
            # the first's add was answered.
            async with self._slots.setdefault(mark, asyncio.Lock()):
                return await self._create(pool, mark, labels, new)

    async def _marked(self, pool: str, mark: str) -> list[tuple[dict[str, Any], DeviceInfo]]:
        items = await self._list({"groupName": pool_group(pool), "serialName": mark})
        found = [
            (item, info)
            for item in items
            if item.get("serialName") == mark and (info := self._view(item, pool=pool))
        ]
        return sorted(found, key=lambda pair: (pair[1].created_at, pair[1].id))

    async def _create(
        self, pool: str, mark: str, labels: dict[str, str], new: NewDevice
    ) -> DeviceInfo:
        # First, always: an earlier attempt whose answer was lost made it.
        found = await self._marked(pool, mark)
        if not found:
            remark = Remark(created=self._wall(), region=new.template.region, labels=labels)
            try:
                phone_id = await self._add(mark, pool, new.template, remark, new.proxy)
            except (TransportError, ServerError):
                # No clear answer: the add may have been applied. Look before any retry.
                found = await self._marked(pool, mark)
                if not found:
                    raise
            else:
                info = DeviceInfo(
                    id=phone_id,
                    status=OFFLINE,
                    region=remark.region,
                    created_at=datetime.fromtimestamp(remark.created, UTC),
                    labels=labels,
                )
                return await self._start(info, SHUT_DOWN)
        (item, info), *late = found
        for _, extra in late:  # a create the server finished late: one phone a slot
            try:
                await self._remove(extra.id)
            except ProviderError as exc:
                logger.info("GeeLark phone %s, a duplicate, not removed yet: %s", extra.id, exc)
        return await self._start(info, _int(item.get("status")))

    async def _add(
        self,
        mark: str,
        pool: str,
        template: DeviceTemplate,
        remark: Remark,
        proxy: ResolvedProxy | None,
    ) -> str:
        profile: dict[str, Any] = {
            "profileName": mark,
            "profileGroup": pool_group(pool),
            "profileTags": [MANAGED_TAG],
            "profileNote": remark.text(),
        }
        secrets: list[str] = []
        if proxy is not None:
            profile["proxyInformation"] = proxy_information(proxy)
            secrets = [proxy.password.get_secret_value(), profile["proxyInformation"]]
        body: dict[str, Any] = {"chargeMode": self.charge_mode, "data": [profile]}
        if template.os_version:
            body["mobileType"] = mobile_type(template.os_version)
        if template.region:
            body["region"] = template.region
        data = await self.api.call("phone/addNew", body, secrets=secrets)
        details = data.get("details") if isinstance(data, dict) else None
        item = details[0] if isinstance(details, list) and details else None
        if isinstance(item, dict):
            code, phone_id = _int(item.get("code")), item.get("id")
            if code not in (0, None):
                raise self.api.item_error("phone/addNew", item)
            if isinstance(phone_id, str | int) and not isinstance(phone_id, bool) and phone_id:
                return str(phone_id)
        raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/addNew: no phone answered")

    async def _start(self, info: DeviceInfo, status: int | None) -> DeviceInfo:
        if status in (STARTED, STARTING):
            return info.model_copy(update={"status": _status(status)[0], "reason": None})
        batch = await self.api.batch("phone/start", [info.id])
        error = batch.failed.get(info.id)
        if error is not None and error.code not in ALREADY_ON:
            raise error
        if error is None and info.id not in batch.done:
            raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/start: not confirmed")
        return info.model_copy(update={"status": PROVISIONING, "reason": None})

    # ------------------------------------------------------------ removals

    async def remove_device(self, device_id: str) -> None:
        item, info = await self._one(device_id)
        with provider_call(pool=info.labels.get(LABEL_POOL, "")):
            await self._remove(device_id, _int(item.get("status")))

    async def _remove(self, device_id: str, status: int | None = STARTED) -> None:
        """Stop (unless listed shut down or expired), confirm it stopped, delete."""
        if status not in (SHUT_DOWN, EXPIRED):
            stop = await self.api.batch("phone/stop", [device_id])
            if device_id in stop.failed:
                raise stop.failed[device_id]  # busy (43005/43006): the caller decides
            await self._stopped(device_id)
        deleted = await self.api.batch("phone/delete", [device_id])
        if device_id in deleted.failed:
            raise deleted.failed[device_id]
        if device_id not in deleted.done:
            raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/delete: not confirmed")

    async def _stopped(self, device_id: str) -> None:
        for attempt in range(self.confirm_tries):
            status = await self.api.batch("phone/status", [device_id])
            if device_id in status.failed:
                raise status.failed[device_id]
            item = status.done.get(device_id)
            if item is not None and _int(item.get("status")) in (SHUT_DOWN, EXPIRED):
                return
            if attempt + 1 < self.confirm_tries:
                await self._sleep(self.confirm_seconds)
        raise ProviderError(
            ErrorType.TEARDOWN_PENDING, None, f"GeeLark phone {device_id}: stop not confirmed yet"
        )

    async def release_pool(self, pool: str) -> int:
        return 0  # a removal deletes: nothing is kept

    async def aclose(self) -> None:
        await self.api.aclose()
