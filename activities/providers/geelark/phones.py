"""One GeeLark key's phones, call by call: listing (paged), start, stop-and-confirm, update
(rename), delete.
Each reads its batch answer per item (`GeeLarkApi.batch`): an id is done only if the answer
says so. The adapter (`provider`) is built on it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from devicepool.activities.errors import ProviderError
from devicepool.activities.providers.geelark.api import MAX_IDS, GeeLarkApi
from devicepool.activities.providers.geelark.errors import GeeLarkServerError
from devicepool.activities.providers.geelark.marks import MANAGED_TAG
from devicepool.api.errors import ErrorType

__all__ = ["EXPIRED", "MAX_PAGES", "SHUT_DOWN", "STARTED", "STARTING", "Phones", "as_int"]

# `phone/status`: 0 started, 1 starting, 2 shut down, 3 expired (`phone/list`: 0..2).
STARTED, STARTING, SHUT_DOWN, EXPIRED = 0, 1, 2, 3
# A listing longer than this many pages of 100 is refused, not cut: a pool that sees part
# of its phones would rent more.
MAX_PAGES = 200
ALREADY_ON = frozenset({43009, 43010})  # start: already started / starting

logger = logging.getLogger(__name__)


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Phones:
    """The phone calls of one key (`api`); `sleep` between a stop and its confirmation."""

    def __init__(
        self,
        api: GeeLarkApi,
        *,
        confirm_tries: int,
        confirm_seconds: float,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.api = api
        self.confirm_tries, self.confirm_seconds = confirm_tries, confirm_seconds
        self._sleep = sleep
        # filters -> the phone ids of its last listing of more than one page (`listed`)
        self._last: dict[str, set[str]] = {}
        # Whether `serialName` matches a part of a name (the docs do not say): None until a
        # listing shows it (`named`).
        self.part_names: bool | None = None

    async def named(self, prefix: str) -> list[dict[str, Any]]:
        """The phones whose names start with `prefix` (and maybe others: the caller checks).

        Asked by `serialName`. The docs do not say that it matches a part of a name (the
        emulator's choice); were it whole names only, a pool would see none of its phones
        and rent for ever. So until a listing has shown which it is, an answer with no name
        of the prefix is asked once more by the managed tag (and, if the tag finds one, by the
        prefix again: a create may have landed in between); whole names only, by the tag
        from then on."""
        if self.part_names is False:
            return await self.listed({"tags": [MANAGED_TAG]})
        items = await self.listed({"serialName": prefix})
        if _any_named(items, prefix):
            self.part_names = True  # a longer name matched its prefix
        if self.part_names:
            return items
        tagged = await self.listed({"tags": [MANAGED_TAG]})
        if _any_named(tagged, prefix):
            # Or a phone that landed between the two listings: the prefix asked once more.
            again = await self.listed({"serialName": prefix})
            if _any_named(again, prefix):
                self.part_names = True
                return again
            self.part_names = False
            logger.warning(
                "GeeLark's serialName filter matched no part of a name: pools are listed by "
                "the tag %r from now on",
                MANAGED_TAG,
            )
        return tagged

    async def listed(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every phone `phone/list` answers for `filters`, page by page until a short page.

        A phone deleted and another created while the pages are read keep the total but
        shift the pages, so one phone may be read on none. A listing of more than one page
        is therefore read a second time when its total moved while paging, or its phones
        are not those of the previous listing of the same filters; the two are joined (a
        phone deleted meanwhile reads not found later; one hidden would be rented again).
        At most two listings a call; one while nothing changes."""
        items, totals = await self._pages(filters)
        key = repr(sorted(filters.items()))
        if len(items) >= MAX_IDS:
            ids = {str(item.get("id")) for item in items}
            if len(set(totals)) > 1 or self._last.get(key) != ids:
                again, _ = await self._pages(filters)
                items += again
        seen: dict[str, dict[str, Any]] = {}
        for item in reversed(items):  # the newest read of a phone
            seen.setdefault(str(item.get("id")), item)
        if len(items) >= MAX_IDS:
            self._last[key] = set(seen)
        return list(reversed(seen.values()))

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

    async def one(self, phone_id: str) -> dict[str, Any] | None:
        """The phone of that id as `phone/list` shows it (None: no such phone)."""
        data = await self.api.call("phone/list", {"ids": [phone_id], "page": 1, "pageSize": 1})
        items = data.get("items") if isinstance(data, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and str(item.get("id")) == phone_id:
                return item
        return None

    async def start(self, phone_id: str) -> None:
        """Boot it (asynchronously); one already started or starting is left as it is."""
        batch = await self.api.batch("phone/start", [phone_id])
        error = batch.failed.get(phone_id)
        if error is not None and error.code not in ALREADY_ON:
            raise error
        if error is None and phone_id not in batch.done:
            raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/start: not confirmed")

    async def stop(self, phone_id: str) -> None:
        """Shut it down and confirm it is (`phone/status` 2 or 3). A stop refused (43005 a
        task runs, 43006 someone is connected) raises `GeeLarkBusyError`: the caller decides;
        one not confirmed in time raises TEARDOWN_PENDING (retryable)."""
        stop = await self.api.batch("phone/stop", [phone_id])
        if phone_id in stop.failed:
            raise stop.failed[phone_id]
        for attempt in range(self.confirm_tries):
            status = await self.api.batch("phone/status", [phone_id])
            if phone_id in status.failed:
                raise status.failed[phone_id]
            item = status.done.get(phone_id)
            if item is not None and as_int(item.get("status")) in (SHUT_DOWN, EXPIRED):
                return
            if attempt + 1 < self.confirm_tries:
                await self._sleep(self.confirm_seconds)
        raise ProviderError(
            ErrorType.TEARDOWN_PENDING, None, f"GeeLark phone {phone_id}: stop not confirmed yet"
        )

    async def update(
        self, phone_id: str, fields: dict[str, Any], *, secrets: list[str] | None = None
    ) -> None:
        """`phone/detail/update` (name, remark, proxy...): done only if answered without a
        failure (`null`, or no `failDetails`); a failed item raises its typed error."""
        data = await self.api.call(
            "phone/detail/update", {"id": phone_id, **fields}, secrets=secrets or ()
        )
        fails = data.get("failDetails") if isinstance(data, dict) else None
        if isinstance(fails, list) and fails:
            first = fails[0] if isinstance(fails[0], dict) else {}
            raise self.api.item_error("phone/detail/update", first)

    async def delete(self, phone_id: str) -> None:
        """Delete it (refused while started or in use: stop it first)."""
        deleted = await self.api.batch("phone/delete", [phone_id])
        if phone_id in deleted.failed:
            raise deleted.failed[phone_id]
        if phone_id not in deleted.done:
            raise GeeLarkServerError(ErrorType.SERVER_ERROR, 200, "phone/delete: not confirmed")

    async def stop_and_delete(self, phone_id: str, status: int | None) -> None:
        """Stop (unless listed shut down or expired), confirm it stopped, delete."""
        if status not in (SHUT_DOWN, EXPIRED):
            await self.stop(phone_id)
        await self.delete(phone_id)


def _any_named(items: list[dict[str, Any]], prefix: str) -> bool:
    return any(str(item.get("serialName", "")).startswith(prefix) for item in items)
