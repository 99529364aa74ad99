"""`BitBrowserProfiles`: a BrowserPool's profiles over one node's Local API (`ProfileProvider`).

A profile's `remark` is its mark, `devicepool pool=<pool> slot=<slot> node=<node>`;
`list_pool` lists every node's, `open` being what this node's `/browser/pids/alive`
says. A refused open answers `open: false` with its reason, with `node_trouble` when
the node or its account is at fault, not the profile (`_refused_or_raise`). Remove
closes, confirms, then deletes; already gone is success. How a pool uses it:
docs/browserpools.md, "How a BrowserPool runs".
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from temporalio import activity

from devicepool.activities.connect_models import CdpEndpoint, ConnectInfo
from devicepool.activities.errors import ProviderError, ServerError, TransportError
from devicepool.activities.node_models import CLOSING_WAIT_SECONDS, NodeOpenResult, ProfileView
from devicepool.activities.providers.bitbrowser.browsers import MAX_BROWSER_MARK, BrowserProfiles
from devicepool.activities.providers.bitbrowser.errors import (
    LocalApiAuthError,
    LocalApiBusyError,
    LocalApiError,
    LocalApiNotFoundError,
    LocalApiQuotaError,
    LocalApiRateLimitedError,
    LocalApiUnavailableError,
    LocalApiUnsupportedError,
)
from devicepool.activities.providers.bitbrowser.models import ProfileProxy
from devicepool.activities.providers.profiles import NewProfile, UnfitProfile

__all__ = ["MARK_PREFIX", "BitBrowserProfiles", "Mark", "parse_mark", "profile_mark"]

MARK_PREFIX = "devicepool"
_MARK = re.compile(r"^devicepool pool=(?P<pool>\S+) slot=(?P<slot>\S+) node=(?P<node>\S+)$")
# The vendor's word for "open on another device": a reset there would cut that node's browser.
_ELSEWHERE = "其他设备"
# Refusals that say nothing of the profile: raised, not answered as `open: false`.
_NODE_TROUBLE = (LocalApiAuthError, LocalApiRateLimitedError)
# Refusals of the node or its account, not of the profile: answered as the node's trouble
# (never counted toward the profile's streak, whose end deletes it, cookies and all). A
# desktop client older than a call (HTTP 404 on `/browser/closing/reset`), an account out
# of balance, at its window cap ("最多": an open sends no field to be too long).
_ACCOUNT_TROUBLE = (LocalApiUnsupportedError, LocalApiQuotaError)
_WINDOW_CAP = "最多"
# The one UNAVAILABLE text that may be the profile's own (its browser would not start):
# the others (busy, try later, timed out) are the desktop client's.
_FAILED_TO_START = "启动失败"
POLL_SECONDS = 0.25

# Called inside the node's activities: their logger names the workflow and activity.
log = activity.logger


@dataclass(frozen=True)
class Mark:
    pool: str
    slot: str
    node: str


def profile_mark(pool: str, slot: str, node: str) -> str:
    """`devicepool pool=<pool> slot=<slot> node=<node>`: a profile's remark (`UnfitProfile`,
    a `ValueError`, if unfit)."""
    for what, value in (("pool", pool), ("slot", slot), ("node", node)):
        if not value or any(c.isspace() for c in value):
            raise UnfitProfile(f"{what} must be non-empty without whitespace, got {value!r}")
    mark = f"{MARK_PREFIX} pool={pool} slot={slot} node={node}"
    if len(mark) > MAX_BROWSER_MARK:
        raise UnfitProfile(f"the mark is over {MAX_BROWSER_MARK} characters")
    return mark


def parse_mark(remark: str) -> Mark | None:
    found = _MARK.match(remark)
    return Mark(found["pool"], found["slot"], found["node"]) if found else None


class BitBrowserProfiles:
    """One node's browser profiles (its Local API): a `ProfileProvider`."""

    def __init__(
        self, profiles: BrowserProfiles, *, closing_wait_seconds: float = CLOSING_WAIT_SECONDS
    ) -> None:
        self.profiles = profiles
        self._closing_wait = closing_wait_seconds
        # One open in flight per node process: the desktop's memory, not the API, is the limit.
        self._opener = asyncio.Semaphore(1)

    def __repr__(self) -> str:
        return f"BitBrowserProfiles({self.profiles!r})"

    async def health(self) -> None:
        await self.profiles.api.health()

    async def aclose(self) -> None:
        await self.profiles.api.aclose()

    # ------------------------------------------------------------ list

    async def list_pool(self, pool: str) -> list[ProfileView]:
        found = await self.profiles.list_all(mark_prefix=f"{MARK_PREFIX} pool={pool} ")
        ids = [p.id for p in found]
        alive = await self.profiles.alive(ids) if ids else {}
        views = [
            ProfileView(id=p.id, slot=mark.slot, node=mark.node, open=p.id in alive)
            for p in found
            if (mark := parse_mark(p.remark)) is not None and mark.pool == pool
        ]
        return sorted(views, key=lambda v: (v.slot, v.node, v.id))

    # ------------------------------------------------------------ create

    async def create_profile(self, new: NewProfile) -> ProfileView:
        """Raises `UnfitProfile` for a pool, slot or node no mark can hold."""
        mark = profile_mark(new.pool, new.slot, new.node)
        proxy = (
            None
            if new.proxy is None
            else ProfileProxy.model_validate(new.proxy, from_attributes=True)
        )
        made = await self.profiles.create_marked(
            mark=mark,
            name=f"{new.pool}/{new.slot}",
            group_id=new.group_id,
            proxy=proxy,
            fingerprint=new.fingerprint,
        )
        kept = await self._one_per_mark(mark, made.id)
        return ProfileView(id=kept, slot=new.slot, node=new.node, open=False)

    async def _one_per_mark(self, mark: str, made: str) -> str:
        """The oldest profile holding `mark`; the others (closed) deleted.

        Two creates of one slot that raced (an attempt the server finished after
        its look-up) both keep the oldest, so they never delete each other's.
        """
        found = await self.profiles.find_by_mark(mark)
        if len(found) <= 1:
            return found[0].id if found else made
        keep, *others = found
        alive = await self.profiles.alive([p.id for p in others])
        extra = [p.id for p in others if p.id not in alive]
        if extra:
            log.warning("mark %r: deleting duplicate profiles %s", mark, extra)
            await self.profiles.delete(extra)
        return keep.id

    # ------------------------------------------------------------ open, close

    async def open_profile(self, profile_id: str) -> NodeOpenResult:
        async with self._opener:
            return await self._open(profile_id)

    async def _open(self, profile_id: str) -> NodeOpenResult:
        """`_try_open`, with the desktop client's own trouble (no answer in the open's
        time, a dropped connection, an HTTP 5xx) answered as the node's, not the profile's."""
        try:
            return await self._try_open(profile_id)
        except (TransportError, ServerError) as exc:
            log.info("profile %s: open got no answer: %s", profile_id, exc)
            return _not_open(exc, node_trouble=True)

    async def _try_open(self, profile_id: str) -> NodeOpenResult:
        try:
            await self.profiles.open(profile_id, queue=True)
            return NodeOpenResult(open=True)
        except LocalApiBusyError as exc:
            if _ELSEWHERE in exc.raw_msg:
                return _not_open(exc)
            busy = exc
        except LocalApiError as exc:
            return _refused_or_raise(exc)
        # Stuck opening or closing: once its browser is gone here, reset and try once more.
        await self._until_gone(profile_id)
        log.info("profile %s: %s; resetting it", profile_id, busy.raw_msg)
        try:
            await self.profiles.reset_closing(profile_id)
            await self.profiles.open(profile_id, queue=True)
        except LocalApiError as exc:
            return _refused_or_raise(exc)
        return NodeOpenResult(open=True)

    async def connect_profile(self, profile_id: str) -> ConnectInfo:
        """`/browser/open` answers an open browser's endpoint again; a profile not open here
        is opened, in turn with the node's other opens."""
        if profile_id in await self.profiles.alive([profile_id]):
            opened = await self.profiles.open(profile_id, queue=True)
        else:
            async with self._opener:
                opened = await self.profiles.open(profile_id, queue=True)
        if not opened.ws and not opened.http:
            return ConnectInfo(message=f"profile {profile_id}: /browser/open answered no endpoint")
        return ConnectInfo(cdp=CdpEndpoint(ws=opened.ws, http=opened.http))

    async def close_profile(self, profile_id: str) -> None:
        await self.profiles.close_and_confirm(profile_id)

    async def _until_gone(self, profile_id: str) -> None:
        """Wait (a while) for a browser still closing to exit, so a reset cuts nothing live."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._closing_wait
        while profile_id in await self.profiles.alive([profile_id]):
            if loop.time() >= deadline:
                return
            await asyncio.sleep(POLL_SECONDS)

    # ------------------------------------------------------------ remove

    async def remove_profile(self, profile_id: str) -> None:
        try:
            await self.close_profile(profile_id)
        except LocalApiNotFoundError:
            return  # already gone
        except LocalApiBusyError as exc:
            if _ELSEWHERE in exc.raw_msg:
                raise  # open on another node: only that node can close it
            # Stuck opening (closing ones answer success): reset once its browser is gone.
            await self._until_gone(profile_id)
            try:
                await self.profiles.reset_closing(profile_id)
            except LocalApiNotFoundError:
                return
            if profile_id in await self.profiles.alive([profile_id]):
                await self.close_profile(profile_id)
        # `/browser/delete/ids` skips ids already gone.
        await self.profiles.delete([profile_id])


def _not_open(exc: ProviderError, *, node_trouble: bool = False) -> NodeOpenResult:
    reason = f"{exc.error_type.value}: {exc.detail}"
    return NodeOpenResult(open=False, reason=reason, node_trouble=node_trouble)


def _refused_or_raise(exc: LocalApiError) -> NodeOpenResult:
    """The profile's own trouble is an answer; the node's key or budget is raised; a busy
    or old desktop client, an account out of balance or at its window cap are answered as
    the node's trouble (not the profile's)."""
    if isinstance(exc, _NODE_TROUBLE):
        raise exc
    if isinstance(exc, _ACCOUNT_TROUBLE) or _WINDOW_CAP in exc.raw_msg:
        return _not_open(exc, node_trouble=True)
    if isinstance(exc, LocalApiUnavailableError) and _FAILED_TO_START not in exc.raw_msg:
        return _not_open(exc, node_trouble=True)
    return _not_open(exc)
