"""`BrowserProfiles`: the browser-profile family (`/browser/*`) of one node's Local API.

There is no idempotency key: `create_marked` looks for its mark first.
Vendor facts relied on: docs/bitbrowser-emulator.md, "What it reproduces".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Required, TypedDict, Unpack

from devicepool.activities.errors import ProviderError, ServerError, TransportError
from devicepool.activities.providers.bitbrowser._paging import (
    MarkedList,
    check_mark,
    new_id,
    validated,
)
from devicepool.activities.providers.bitbrowser.errors import CloseUnconfirmedError, LocalApiError
from devicepool.activities.providers.bitbrowser.local_api import LocalApi
from devicepool.activities.providers.bitbrowser.models import (
    MAX_PAGE_SIZE,
    BrowserPage,
    BrowserProfile,
    MarkedCreate,
    OpenedBrowser,
    ProfileProxy,
)
from devicepool.api.errors import ErrorType

__all__ = ["MAX_BROWSER_MARK", "MAX_IDS_PER_CALL", "SECRET_PROFILE_FIELDS", "BrowserProfiles"]

# `/browser/delete/ids` takes at most 100 ids; other id-list calls are cut to the same.
MAX_IDS_PER_CALL = 100
# A browser profile's `remark` length is undocumented; the cloud-phone family allows 500.
MAX_BROWSER_MARK = 500
# Fields of a create or update body whose values are secrets: never in an error.
SECRET_PROFILE_FIELDS = frozenset({"password", "cookie", "proxyPassword", "faSecretKey"})
# The fields `create_marked` writes itself (the mark, and the body's shape).
_OWN_FIELDS = frozenset({"id", "name", "remark", "ids"})


class NewProfile(TypedDict, total=False):
    """What `BrowserProfiles.create` (and so `create_marked`) takes."""

    mark: Required[str]
    name: str | None
    group_id: str | None
    proxy: ProfileProxy | None
    fingerprint: Mapping[str, Any] | None
    fields: Mapping[str, Any] | None


class BrowserProfiles(MarkedList[BrowserProfile]):
    """The browser profiles the account holds, through one node (its browsers are its own)."""

    LIST, PAGE, MARK, MAX_MARK = "/browser/list", BrowserPage, "remark", MAX_BROWSER_MARK
    MARKED, ORDER = "profiles marked", {"sort": "asc"}

    def __init__(
        self,
        api: LocalApi,
        *,
        open_timeout: float = 180.0,
        settle_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        # `queue: true` waits its turn behind the node's other opens: a long call.
        self.open_timeout = open_timeout
        # How long after an uncertain create the look-up for its mark waits: the desktop
        # client may still be writing the profile when our deadline ran out.
        self.settle_seconds = settle_seconds
        self._clock = clock
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"BrowserProfiles({self.api!r})"

    # ------------------------------------------------------------ create, find, update

    async def create(self, **profile: Unpack[NewProfile]) -> str:
        """One create (`/browser/update` without `id`): the new profile's id. Not retried.

        `mark` goes into `remark` (and `name`, unless given). A lost answer may
        have made the profile: use `create_marked`, which checks the mark first.
        """
        body = _create_body(profile)
        data = await self.api.call("/browser/update", body, secrets=_secrets_of(body))
        return new_id(data, "POST /browser/update", "profile")

    async def create_marked(
        self, *, attempts: int = 3, **profile: Unpack[NewProfile]
    ) -> MarkedCreate:
        """The profile holding `mark` (oldest first): found if one exists, else created.

        Before each create the mark is looked up; after an answer that leaves the
        outcome open (no answer, a timeout, a 5xx) the next look-up, `settle_seconds`
        later, says whether that create happened. A refusal (`success: false`) made
        nothing and is raised. After a create, it looks once more for others holding
        the mark (the caller removes them).
        """
        mark = check_mark(profile["mark"], max_length=MAX_BROWSER_MARK)
        last: ProviderError | None = None
        for attempt in range(attempts):
            if attempt and self.settle_seconds > 0:
                await self._sleep(self.settle_seconds)
            found = await self.find_by_mark(mark)
            if found:
                first, *others = found
                return MarkedCreate(id=first.id, created=False, duplicates=[o.id for o in others])
            try:
                made = await self.create(**profile)
            except (TransportError, ServerError) as exc:
                if isinstance(exc, LocalApiError):
                    raise  # refused: nothing was made
                last = exc
                continue
            again = [o.id for o in await self.find_by_mark(mark) if o.id != made]
            return MarkedCreate(id=made, created=True, duplicates=again)
        assert last is not None
        raise last

    async def list_all(
        self, *, group_id: str | None = None, mark_prefix: str | None = None
    ) -> list[BrowserProfile]:
        """Every profile of `group_id` and/or whose `remark` starts with `mark_prefix`."""
        filters = {"group_id": group_id, "remark": mark_prefix}
        return await self._list_all(filters, what="profiles", prefix=mark_prefix)

    async def list_page(
        self,
        page: int,
        *,
        page_size: int = MAX_PAGE_SIZE,
        group_id: str | None = None,
        name: str | None = None,
        remark: str | None = None,
    ) -> BrowserPage:
        """One page of `/browser/list` (0-based; `page_size` at most 100), oldest first."""
        filters = {"groupId": group_id, "name": name, "remark": remark}
        return await self._page(page, page_size, filters)

    async def get(self, profile_id: str) -> BrowserProfile:
        """`/browser/detail`: one profile (`LocalApiNotFoundError` when it is unknown)."""
        data = await self.api.call("/browser/detail", {"id": profile_id})
        return validated(BrowserProfile, data, "POST /browser/detail")

    # ------------------------------------------------------------ browsers

    async def open(
        self, profile_id: str, *, queue: bool = True, args: Sequence[str] = ()
    ) -> OpenedBrowser:
        """`/browser/open`: the browser's ws and http (`host:port`) addresses, pid, core."""
        body: dict[str, Any] = {"id": profile_id}
        if queue:
            body["queue"] = True
        if args:
            body["args"] = list(args)
        data = await self.api.call("/browser/open", body, timeout=self.open_timeout)
        if isinstance(data, dict) and not data.get("id"):
            data = {**data, "id": profile_id}
        return validated(OpenedBrowser, data, "POST /browser/open")

    async def close(self, profile_id: str) -> None:
        """`/browser/close`: asks the browser to close (its process may live on a while)."""
        await self.api.call("/browser/close", {"id": profile_id})

    async def alive(self, ids: Sequence[str]) -> dict[str, int]:
        """`/browser/pids/alive`: `{id: pid}` of those whose browser still runs on this node."""
        alive: dict[str, int] = {}
        for chunk in _chunks(ids):
            data = await self.api.call("/browser/pids/alive", {"ids": chunk})
            if data is None:
                continue
            if not isinstance(data, dict):
                raise ServerError(
                    ErrorType.SERVER_ERROR, 200, "POST /browser/pids/alive: not an {id: pid} map"
                )
            for key, pid in data.items():
                # A pid the answer spells oddly is still a live browser: 0 stands for "unknown".
                alive[str(key)] = pid if isinstance(pid, int) else _pid(pid)
        return alive

    async def close_and_confirm(
        self, profile_id: str, *, wait_seconds: float = 30.0, poll_seconds: float = 0.5
    ) -> None:
        """Close, then poll `/browser/pids/alive` until the id is absent (at most `wait_seconds`).

        Raises `CloseUnconfirmedError` (retryable) if the process outlives the wait.
        """
        await self.close(profile_id)
        deadline = self._clock() + wait_seconds
        while True:
            if profile_id not in await self.alive([profile_id]):
                return
            left = deadline - self._clock()
            if left <= 0:
                raise CloseUnconfirmedError(
                    f"profile {profile_id}: its browser still ran {wait_seconds:g}s after close"
                )
            await self._sleep(min(poll_seconds, left))

    async def reset_closing(self, profile_id: str) -> None:
        """`/browser/closing/reset`: a profile stuck opening or closing is closed again.

        Only for a browser known to be gone (confirm with `alive` first).
        """
        await self.api.call("/browser/closing/reset", {"id": profile_id})

    # ------------------------------------------------------------ delete

    async def delete(self, ids: Sequence[str]) -> None:
        """`/browser/delete/ids` in chunks of at most 100. Close and confirm each first."""
        for chunk in _chunks(ids):
            await self.api.call("/browser/delete/ids", {"ids": chunk})

    # ------------------------------------------------------------ plumbing

    async def _list_call(self, body: dict[str, Any], on_turn: Callable[[], None] | None) -> Any:
        return await self.api.call(self.LIST, body)


def _create_body(profile: NewProfile) -> dict[str, Any]:
    mark = check_mark(profile["mark"], max_length=MAX_BROWSER_MARK)
    extra = dict(profile.get("fields") or {})
    if _OWN_FIELDS & set(extra):
        raise ValueError(f"`fields` may not set {sorted(_OWN_FIELDS & set(extra))}")
    body: dict[str, Any] = {**extra, "name": profile.get("name") or mark, "remark": mark}
    if group_id := profile.get("group_id"):
        body["groupId"] = group_id
    body["browserFingerPrint"] = dict(profile.get("fingerprint") or {})  # {}: a random fingerprint
    proxy = profile.get("proxy")
    if proxy is None or proxy.type == "noproxy":
        body.update(proxyMethod=2, proxyType="noproxy")
    else:
        body.update(
            proxyMethod=2,
            proxyType=proxy.type,
            host=proxy.host,
            port=proxy.port,
            proxyUserName=proxy.username,
            proxyPassword=proxy.password.get_secret_value(),
        )
    return body


def _secrets_of(body: Mapping[str, Any]) -> list[str]:
    return [str(v) for k, v in body.items() if k in SECRET_PROFILE_FIELDS and v]


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(ids))
    return [unique[i : i + MAX_IDS_PER_CALL] for i in range(0, len(unique), MAX_IDS_PER_CALL)]


def _pid(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
