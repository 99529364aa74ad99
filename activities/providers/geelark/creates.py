"""The create of the `geelark` adapter (`GeeLarkProvider.create_device`).

A create first looks its slot's mark up (GeeLark has no idempotency key: an earlier attempt
whose answer was lost made it), then, on an account served by its node worker, claims a
stopped phone of its pool's warm reserve (`reserve`), else adds a phone (`phone/addNew`),
looks again when the add got no clear answer, and starts it (`addNew` makes a shut-down
phone). At the plan's profile cap (44002) a reserve phone is deleted and the add sent
again. One create fits inside its activity's attempt (`ADD_BY_SECONDS`...). Why:
docs/providers.md, "GeeLark's Open API" and "The warm reserve on GeeLark".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from weakref import WeakValueDictionary

from devicepool.activities.device_models import OFFLINE, PROVISIONING, DeviceInfo
from devicepool.activities.errors import (
    InvalidArgumentError,
    ProviderError,
    ServerError,
    TransportError,
)
from devicepool.activities.heartbeats import end_if_cancelled_unsent
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice, provider_call
from devicepool.activities.providers.geelark.api import GeeLarkApi
from devicepool.activities.providers.geelark.errors import GeeLarkQuotaError, GeeLarkServerError
from devicepool.activities.providers.geelark.marks import (
    MANAGED_TAG,
    Remark,
    device_id,
    pool_group,
    slot_digest,
    slot_mark,
)
from devicepool.activities.providers.geelark.phones import (
    SHUT_DOWN,
    STARTED,
    STARTING,
    Phones,
    as_int,
)
from devicepool.activities.providers.geelark.reserve import PROFILE_CAP, Reserve
from devicepool.activities.providers.geelark.words import (
    DEFAULT_MOBILE_TYPE,
    mobile_type,
    phone_status,
    proxy_information,
)
from devicepool.activities.proxy import ResolvedProxy
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_POOL

__all__ = ["ADD_BY_SECONDS", "ANSWER_BY_SECONDS", "PER_MINUTE", "SEND_BY_SECONDS", "Creates"]

logger = logging.getLogger(__name__)

# `phone/addNew` `chargeMode`: 0 bills a phone per running minute. Never 1 (a monthly rental,
# charged when the phone is rented): a pool replaces phones, and each would rent a month.
PER_MINUTE = 0
# A create is up to four calls (the mark, `addNew`, the mark again after a lost answer, the
# start) in an activity attempt of 20 s (workflows/provision), retried on any worker when it
# runs out: so, from the create's start, `addNew` is sent by 8 s, any call by 15 s, and no
# answer is awaited past 18 s. Past them it fails retryable; the next attempt finds by its
# mark what this one made.
ADD_BY_SECONDS = 8.0
SEND_BY_SECONDS = 15.0
ANSWER_BY_SECONDS = 18.0


class Creates:
    """The creates of one account's adapter: `view` is its reading of a listed phone
    (`GeeLarkProvider._view`), `reserve` its warm reserve (None: none)."""

    def __init__(
        self,
        api: GeeLarkApi,
        phones: Phones,
        reserve: Reserve | None,
        *,
        view: Callable[..., DeviceInfo | None],
        wall_clock: Callable[[], float],
    ) -> None:
        self.api, self.phones, self.reserve = api, phones, reserve
        self._view = view
        self._wall = wall_clock
        # slot mark -> the lock one create of that slot holds at a time
        self._slots: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    async def create(self, new: NewDevice) -> DeviceInfo:
        """`GeeLarkProvider.create_device` of a platform it serves."""
        labels = dict(new.labels)
        pool = labels.get(LABEL_POOL, "")
        if not pool:
            raise InvalidArgumentError(ErrorType.INVALID_ARGUMENT, None, "a device needs a pool")
        mark = slot_mark(pool, new.idempotency_key)
        began = self.api.clock()
        bounds = self.api.deadlines(
            send_by=began + SEND_BY_SECONDS, answer_by=began + ANSWER_BY_SECONDS
        )
        with provider_call(pool=pool), bounds:
            # Two attempts of one slot one at a time: the second looks the mark up after
            # the first's add was answered.
            async with self._slots.setdefault(mark, asyncio.Lock()):
                return await self._create(pool, mark, labels, new, began)

    async def _marked(self, pool: str, mark: str) -> list[tuple[dict[str, Any], DeviceInfo]]:
        items = await self.phones.listed({"serialName": mark})  # any group (`list_pool`)
        found = [
            (item, info)
            for item in items
            if item.get("serialName") == mark and (info := self._view(item, pool=pool))
        ]
        return sorted(found, key=lambda pair: (pair[1].created_at, pair[1].id))

    async def _create(
        self, pool: str, mark: str, labels: dict[str, str], new: NewDevice, began: float
    ) -> DeviceInfo:
        # First, always: an earlier attempt whose answer was lost made it.
        found = await self._marked(pool, mark)
        if not found:
            end_if_cancelled_unsent()  # nothing of an earlier attempt: a cancelled one ends
        if not found and self.reserve is not None:
            # Claimed under this process's lock: the node's, the account's only process.
            claimed = await self.reserve.claim(pool, mark, labels, new.template, new.proxy)
            if claimed is not None:
                phone_id, remark = claimed
                return await self._start(phone_id, self._fresh(phone_id, mark, remark), SHUT_DOWN)
        if not found:
            remark = Remark(created=self._wall(), region=new.template.region, labels=labels)
            try:
                add_by = began + ADD_BY_SECONDS
                phone_id = await self._add_room(mark, pool, new.template, remark, new.proxy, add_by)
            except (TransportError, ServerError):
                # No clear answer: the add may have been applied. Look before any retry.
                found = await self._marked(pool, mark)
                if not found:
                    raise
            else:
                return await self._start(phone_id, self._fresh(phone_id, mark, remark), SHUT_DOWN)
        (item, info), *late = found
        for extra_item, _ in late:  # a create the server finished late: one phone a slot
            extra = str(extra_item.get("id"))
            try:
                await self.phones.stop_and_delete(extra, as_int(extra_item.get("status")))
            except ProviderError as exc:
                logger.info("GeeLark phone %s, a duplicate, not removed yet: %s", extra, exc)
        return await self._start(str(item.get("id")), info, as_int(item.get("status")))

    def _fresh(self, phone_id: str, mark: str, remark: Remark) -> DeviceInfo:
        return DeviceInfo(
            id=device_id(phone_id, slot_digest(mark) or ""),
            status=OFFLINE,
            region=remark.region,
            created_at=datetime.fromtimestamp(remark.created, UTC),
            labels=dict(remark.labels),
        )

    async def _add_room(
        self,
        mark: str,
        pool: str,
        template: DeviceTemplate,
        remark: Remark,
        proxy: ResolvedProxy | None,
        add_by: float,
    ) -> str:
        """`_add`, sent by `add_by`; at the plan's profile cap (44002), a reserve phone deleted
        (within the create's budget, not the add's) and added again. The 44002 is raised
        as it came when nothing could be freed, whatever stopped the freeing."""
        try:
            with self.api.deadlines(send_by=add_by):
                return await self._add(mark, pool, template, remark, proxy)
        except GeeLarkQuotaError as exc:
            if self.reserve is None or exc.code != PROFILE_CAP:
                raise
            cap = exc
        try:
            freed = await self.reserve.free_one()
        except ProviderError as exc:
            logger.info("GeeLark pool %s: no reserve phone freed at the profile cap: %s", pool, exc)
            freed = False
        if not freed:
            raise cap
        # Room made: an add past `add_by` is refused unsent (retried: the next attempt adds).
        with self.api.deadlines(send_by=add_by):
            return await self._add(mark, pool, template, remark, proxy)

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
        body: dict[str, Any] = {"chargeMode": PER_MINUTE, "data": [profile]}
        os_version = template.os_version
        body["mobileType"] = mobile_type(os_version) if os_version else DEFAULT_MOBILE_TYPE
        if template.region:
            body["region"] = template.region
        data = await self.api.call("phone/addNew", body, secrets=secrets)
        details = data.get("details") if isinstance(data, dict) else None
        item = details[0] if isinstance(details, list) and details else None
        if isinstance(item, dict):
            code, phone_id = as_int(item.get("code")), item.get("id")
            if code not in (0, None):
                raise self.api.item_error("phone/addNew", item)
            if isinstance(phone_id, str | int) and not isinstance(phone_id, bool) and phone_id:
                return str(phone_id)
        raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/addNew: no phone answered")

    async def _start(self, phone_id: str, info: DeviceInfo, status: int | None) -> DeviceInfo:
        if status in (STARTED, STARTING):
            return info.model_copy(update={"status": phone_status(status)[0], "reason": None})
        await self.phones.start(phone_id)
        return info.model_copy(update={"status": PROVISIONING, "reason": None})
