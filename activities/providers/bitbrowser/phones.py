"""`CloudPhones`: the cloud-phone family (`/phone/*`) of the Local API, paced to 1 call a second.

Every call, listings and status reads included, takes its turn on the account's
`PhonePacer`; a refusal for going too fast holds the pacer for its `retry_after`.
The mark is the phone's `name` (at most 30 characters), the one field `/phone/list`
filters by. Vendor facts relied on: docs/bitbrowser-emulator.md, "What it reproduces".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from devicepool.activities.connect_models import AdbLogin, parse_adb
from devicepool.activities.errors import ServerError
from devicepool.activities.heartbeats import end_if_cancelled_unsent
from devicepool.activities.providers.bitbrowser._paging import (
    MarkedList,
    check_mark,
    new_id,
    page_items,
)
from devicepool.activities.providers.bitbrowser.errors import LocalApiRateLimitedError
from devicepool.activities.providers.bitbrowser.local_api import LocalApi, is_read
from devicepool.activities.providers.bitbrowser.models import (
    MAX_PAGE_SIZE,
    ComputeType,
    Phone,
    PhonePage,
    PhoneProxy,
)
from devicepool.activities.providers.bitbrowser.pacer import PhonePacer
from devicepool.api.errors import ErrorType

__all__ = ["MAX_PHONE_MARK", "MAX_PHONE_REMARK", "SECRET_PHONE_FIELDS", "CloudPhones"]

MAX_PHONE_MARK = 30  # `name`: at most 30 characters
MAX_PHONE_REMARK = 500
SECRET_PHONE_FIELDS = frozenset({"proxyPassword"})


class CloudPhones(MarkedList[Phone]):
    """The account's cloud phones, through one node's Local API, at most one call per turn."""

    LIST, PAGE, MARK, MAX_MARK = "/phone/list", PhonePage, "name", MAX_PHONE_MARK
    MARKED = "phones named"

    def __init__(
        self,
        api: LocalApi,
        *,
        pacer: PhonePacer | None = None,
    ) -> None:
        self.api = api
        # One pacer per account, shared by every CloudPhones of it (`pacer`).
        self.pacer = pacer if pacer is not None else PhonePacer()

    def __repr__(self) -> str:
        return f"CloudPhones({self.api!r}, pacer={self.pacer!r})"

    # ------------------------------------------------------------ profiles

    async def add(
        self,
        *,
        mark: str,
        region_id: str,
        compute_type: ComputeType,
        proxy: PhoneProxy,
        remark: str | None = None,
        ip_check_service: str = "ip123in",
        udp: bool = True,
        fingerprint: Mapping[str, Any] | None = None,
        group_id: str | None = None,
    ) -> str:
        """One `/phone/profile/add` (powered off): the new phone's id. Not retried: a lost
        answer may have made the phone (`PhoneProvider` looks its mark up first)."""
        check_mark(mark, max_length=MAX_PHONE_MARK)
        if not region_id:
            raise ValueError("region_id (the compute type id copied from the client) is required")
        remark = mark if remark is None else remark
        if len(remark) > MAX_PHONE_REMARK:
            raise ValueError(f"remark is at most {MAX_PHONE_REMARK} characters")
        body: dict[str, Any] = {
            "regionId": region_id,
            "computeType": int(ComputeType(compute_type)),
            "name": mark,
            "remark": remark,
            **proxy.fields(),
            "ipCheckService": ip_check_service,
            "udp": 1 if udp else 0,
            "cloudPhonesFingerPrint": dict(fingerprint or {}),
        }
        if group_id:
            body["groupId"] = group_id
        return new_id(
            await self._call("/phone/profile/add", body), "POST /phone/profile/add", "phone"
        )

    async def update(self, phone_id: str, fields: Mapping[str, Any]) -> None:
        """`/phone/profile/update`: only `fields` change (`regionId` cannot)."""
        if not fields:
            raise ValueError("update needs at least one field")
        if "id" in fields:
            raise ValueError("the id goes in `phone_id`, not in `fields`")
        if "name" in fields:
            check_mark(str(fields["name"]), max_length=MAX_PHONE_MARK)
        await self._call("/phone/profile/update", {**fields, "id": phone_id})

    async def list_all(
        self,
        *,
        group_id: str | None = None,
        mark_prefix: str | None = None,
        host: str | None = None,
        on_turn: Callable[[], None] | None = None,
    ) -> list[Phone]:
        """Every phone of `group_id` / proxy `host` and/or whose name starts with `mark_prefix`.

        Each page is one call of the budget: 500 phones take 5 seconds. `on_turn` is
        called when the first page's call gets its turn, right before it is sent.
        """
        filters = {"group_id": group_id, "name": mark_prefix, "host": host}
        return await self._list_all(filters, what="phones", prefix=mark_prefix, on_turn=on_turn)

    async def list_page(
        self,
        page: int,
        *,
        page_size: int = MAX_PAGE_SIZE,
        group_id: str | None = None,
        name: str | None = None,
        seq: int | None = None,
        host: str | None = None,
        on_turn: Callable[[], None] | None = None,
    ) -> PhonePage:
        """One page of `/phone/list` (0-based, `page_size` at most 100); `on_turn` as
        `list_all`'s."""
        filters = {"groupId": group_id, "name": name, "host": host, "seq": seq}
        return await self._page(page, page_size, filters, on_turn)

    async def adb_login(self, phone_id: str, *, seq: int) -> AdbLogin | None:
        """The phone's ADB login, password included: `/phone/list`'s `adb` of the phone
        numbered `seq` (one call). None while ADB is off for the phone's environment or the
        phone is not running. The only read that keeps the password; never logged."""
        data = await self._call(self.LIST, {"page": 0, "pageSize": 1, "seq": seq})
        items, _ = page_items(data, f"POST {self.LIST}")
        for item in items:
            if isinstance(item, dict) and str(item.get("id")) == phone_id:
                return parse_adb(item.get("adb"))
        return None

    # ------------------------------------------------------------ power

    async def open(self, phone_id: str) -> None:
        """`/phone/openphone`: power on, asynchronously (about 60 s from off, 5 s suspended)."""
        await self._call("/phone/openphone", {"id": phone_id})

    async def running(self, phone_id: str) -> bool:
        """`/phone/running`: whether the phone is powered on and up."""
        data = await self._call("/phone/running", {"id": phone_id})
        if isinstance(data, bool):
            return data
        if isinstance(data, dict) and isinstance(data.get("running"), bool):
            return bool(data["running"])
        raise ServerError(ErrorType.SERVER_ERROR, 200, "POST /phone/running: not true or false")

    async def suspend(self, phone_id: str) -> None:
        """`/phone/suspend`: the window closes, the phone runs on (and is still billed)."""
        await self._call("/phone/suspend", {"id": phone_id})

    async def shutdown(self, phone_id: str) -> None:
        """`/phone/shutdown`: powered off; billing stops (temporary compute)."""
        await self._call("/phone/shutdown", {"id": phone_id})

    async def restart(self, phone_id: str) -> None:
        """`/phone/restart`: a reboot (devicepool replaces rather than repairs; here for tools)."""
        await self._call("/phone/restart", {"id": phone_id})

    async def recover(self, phone_id: str) -> None:
        """`/phone/profile/recover`: a fresh start (60 per profile per month: `LocalApiQuotaError`)."""
        await self._call("/phone/profile/recover", {"id": phone_id})

    # ------------------------------------------------------------ plumbing

    async def _list_call(self, body: dict[str, Any], on_turn: Callable[[], None] | None) -> Any:
        return await self._call(self.LIST, body, on_turn=on_turn)

    async def _call(
        self, path: str, body: dict[str, Any], *, on_turn: Callable[[], None] | None = None
    ) -> Any:
        secrets = [str(v) for k, v in body.items() if k in SECRET_PHONE_FIELDS and v]
        # A write of a cancelled create that sent nothing is refused before its turn, or
        # as its turn comes: unsent, and the next turn not spaced for it (R31 #1).
        refuse = None if is_read(path) else end_if_cancelled_unsent
        if refuse is not None:
            refuse()
        async with self.pacer.turn(refuse=refuse):
            if on_turn is not None:
                on_turn()
            try:
                return await self.api.call(path, body, secrets=secrets)
            except LocalApiRateLimitedError as exc:
                self.pacer.hold(exc.retry_after or self.pacer.interval)
                raise
