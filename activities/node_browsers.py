"""`NodeBrowserActivities`: a node worker's BrowserPool activities over its one Local API.

Served only by a node worker, on `node_task_queue(node)`; workflows call them
through `activities.node_definitions.NodeActivityDefinitions`.

- Membership and placement live on the profile, as the Local API has no labels:
  its `remark` is the mark `devicepool pool=<pool> slot=<slot> node=<node>`
  (`profile_mark`), the node being the one that created it. Profiles belong to
  the account, so `node_list_profiles` lists every node's; `open` is what this
  node's `/browser/pids/alive` says.
- No idempotency key: `node_create_profile` looks for its mark before creating
  (and after an uncertain answer, `BrowserProfiles.create_marked`); when two
  profiles hold one mark, the oldest is kept and the others, never opened, go.
- The proxy's gateway and password come from this worker's `proxyPools`; the
  username is the pool's `usernameTemplate` with a session id per pool and slot.
- One open in flight per node process (the desktop's memory), `queue: true`; a
  profile stuck opening or closing is reset (`/browser/closing/reset`) and
  opened once more. A refused open answers `open: false` with the reason; a
  desktop client that is busy, goes away, outlasts the open's time or is older
  than a call, and an account out of balance or at its window cap, answer
  `open: false` with `node_trouble` (not the profile's failure: its cookies stay).
- Delete closes, confirms with `pids/alive`, then deletes; already gone is success.

Every failure leaves as `to_application_error` (the Local API's classification);
messages come from the client, which scrubs its key and the proxy passwords.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from devicepool.activities.errors import (
    ProviderError,
    ServerError,
    TransportError,
    configuration_error,
    to_application_error,
)
from devicepool.activities.heartbeats import heartbeating
from devicepool.activities.node_definitions import NodeActivityDefinitions
from devicepool.activities.node_models import (
    CLOSING_WAIT_SECONDS,
    NodeCreateInput,
    NodeDeleteInput,
    NodeListInput,
    NodeListResult,
    NodeOpenInput,
    NodeOpenResult,
    ProfileView,
)
from devicepool.activities.providers.bitbrowser import (
    MAX_BROWSER_MARK,
    BrowserProfile,
    BrowserProfiles,
    LocalApiAuthError,
    LocalApiBusyError,
    LocalApiError,
    LocalApiNotFoundError,
    LocalApiQuotaError,
    LocalApiRateLimitedError,
    LocalApiUnavailableError,
    LocalApiUnsupportedError,
    ProfileProxy,
)
from devicepool.activities.proxy import resolve_proxy
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType

__all__ = ["MARK_PREFIX", "Mark", "NodeBrowserActivities", "parse_mark", "profile_mark"]

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


@dataclass(frozen=True)
class Mark:
    pool: str
    slot: str
    node: str


def profile_mark(pool: str, slot: str, node: str) -> str:
    """`devicepool pool=<pool> slot=<slot> node=<node>`: a profile's remark (ValueError if unfit)."""
    for what, value in (("pool", pool), ("slot", slot), ("node", node)):
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"{what} must be non-empty without whitespace, got {value!r}")
    mark = f"{MARK_PREFIX} pool={pool} slot={slot} node={node}"
    if len(mark) > MAX_BROWSER_MARK:
        raise ValueError(f"the mark is over {MAX_BROWSER_MARK} characters")
    return mark


def parse_mark(remark: str) -> Mark | None:
    found = _MARK.match(remark)
    return Mark(found["pool"], found["slot"], found["node"]) if found else None


def _pool_prefix(pool: str) -> str:
    return f"{MARK_PREFIX} pool={pool} "


class NodeBrowserActivities(NodeActivityDefinitions):
    """Bound activities over one node's browser profiles (its Local API) and proxy pools."""

    def __init__(
        self,
        profiles: BrowserProfiles,
        *,
        node: str,
        proxy_pools: Mapping[str, ProxyPoolSettings] | None = None,
        closing_wait_seconds: float = CLOSING_WAIT_SECONDS,
    ) -> None:
        self.profiles = profiles
        self.node = node
        self._proxy_pools = dict(proxy_pools or {})
        self._closing_wait = closing_wait_seconds
        # One open in flight per node process: the desktop's memory, not the API, is the limit.
        self._opener = asyncio.Semaphore(1)

    def __repr__(self) -> str:
        return (
            f"NodeBrowserActivities(node={self.node!r}, {self.profiles!r}, "
            f"proxy_pools={sorted(self._proxy_pools)!r})"
        )

    def activities(self) -> list[Any]:
        """What the node's task queue serves."""
        return [
            self.node_list_profiles,
            self.node_create_profile,
            self.node_open_profile,
            self.node_delete_profile,
        ]

    async def aclose(self) -> None:
        await self.profiles.api.aclose()

    # ------------------------------------------------------------ list

    @activity.defn
    async def node_list_profiles(self, input: NodeListInput) -> NodeListResult:
        try:
            async with heartbeating():
                found = await self.profiles.list_all(mark_prefix=_pool_prefix(input.pool))
                ids = [p.id for p in found]
                alive = await self.profiles.alive(ids) if ids else {}
        except ProviderError as exc:
            raise to_application_error(exc) from None
        views = []
        for profile in found:
            mark = parse_mark(profile.remark)
            if mark is None or mark.pool != input.pool:
                continue
            views.append(_view(profile, mark, open=profile.id in alive))
        return NodeListResult(profiles=sorted(views, key=lambda v: (v.slot, v.node, v.id)))

    # ------------------------------------------------------------ create

    @activity.defn
    async def node_create_profile(self, input: NodeCreateInput) -> ProfileView:
        try:
            mark = profile_mark(input.pool, input.slot, self.node)
        except ValueError as err:
            raise ApplicationError(
                f"pool {input.pool!r} slot {input.slot!r}: {err}",
                type=ErrorType.INVALID_ARGUMENT.value,
                non_retryable=True,
            ) from None
        proxy = self._proxy(input)
        try:
            async with heartbeating():
                made = await self.profiles.create_marked(
                    mark=mark,
                    name=f"{input.pool}/{input.slot}",
                    group_id=input.group_id,
                    proxy=proxy,
                    fingerprint=input.fingerprint,
                )
                kept = await self._one_per_mark(mark, made.id)
        except ProviderError as exc:
            activity.logger.info("pool %s slot %s: create failed: %s", input.pool, input.slot, exc)
            raise to_application_error(exc) from None
        activity.logger.info(
            "pool %s slot %s: profile %s %s on node %s",
            input.pool,
            input.slot,
            kept,
            "created" if made.created else "found",
            self.node,
        )
        return ProfileView(id=kept, slot=input.slot, node=self.node, open=False)

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
            activity.logger.warning("mark %r: deleting duplicate profiles %s", mark, extra)
            await self.profiles.delete(extra)
        return keep.id

    def _proxy(self, input: NodeCreateInput) -> ProfileProxy | None:
        if input.proxy_pool is None:
            return None
        settings = self._proxy_pools.get(input.proxy_pool)
        if settings is None:
            raise configuration_error(
                ErrorType.UNKNOWN_PROXY_POOL,
                f"proxy pool {input.proxy_pool!r} is not configured on node {self.node} "
                f"(configured: {', '.join(sorted(self._proxy_pools)) or 'none'})",
            )
        try:
            resolved = resolve_proxy(
                settings,
                idempotency_key=f"browserpool:{input.pool}:{input.slot}",
                ttl=input.session_ttl_seconds,
            )
        except ValueError as err:
            raise configuration_error(ErrorType.UNKNOWN_PROXY_POOL, str(err)) from None
        return ProfileProxy(
            type=resolved.type,
            host=resolved.host,
            port=resolved.port,
            username=resolved.username,
            password=resolved.password,
        )

    # ------------------------------------------------------------ open

    @activity.defn
    async def node_open_profile(self, input: NodeOpenInput) -> NodeOpenResult:
        try:
            async with heartbeating(), self._opener:
                return await self._open(input.id)
        except ProviderError as exc:
            raise to_application_error(exc) from None

    async def _open(self, profile_id: str) -> NodeOpenResult:
        """`_try_open`, with the desktop client's own trouble (no answer in the open's
        time, a dropped connection, an HTTP 5xx) answered as the node's, not the profile's."""
        try:
            return await self._try_open(profile_id)
        except (TransportError, ServerError) as exc:
            activity.logger.info("profile %s: open got no answer: %s", profile_id, exc)
            return _node_trouble(exc)

    async def _try_open(self, profile_id: str) -> NodeOpenResult:
        try:
            await self.profiles.open(profile_id, queue=True)
            return NodeOpenResult(open=True)
        except LocalApiBusyError as exc:
            if _ELSEWHERE in exc.raw_msg:
                return _refused(exc)
            busy = exc
        except LocalApiError as exc:
            return _refused_or_raise(exc)
        # Stuck opening or closing: once its browser is gone here, reset and try once more.
        await self._until_gone(profile_id)
        activity.logger.info("profile %s: %s; resetting it", profile_id, busy.raw_msg)
        try:
            await self.profiles.reset_closing(profile_id)
            await self.profiles.open(profile_id, queue=True)
        except LocalApiError as exc:
            return _refused_or_raise(exc)
        return NodeOpenResult(open=True)

    async def _until_gone(self, profile_id: str) -> None:
        """Wait (a while) for a browser still closing to exit, so a reset cuts nothing live."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._closing_wait
        while profile_id in await self.profiles.alive([profile_id]):
            if loop.time() >= deadline:
                return
            await asyncio.sleep(POLL_SECONDS)

    # ------------------------------------------------------------ delete

    @activity.defn
    async def node_delete_profile(self, input: NodeDeleteInput) -> None:
        try:
            async with heartbeating():
                await self._delete(input.id)
        except ProviderError as exc:
            raise to_application_error(exc) from None

    async def _delete(self, profile_id: str) -> None:
        try:
            await self.profiles.close_and_confirm(profile_id)
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
                await self.profiles.close_and_confirm(profile_id)
        # `/browser/delete/ids` skips ids already gone.
        await self.profiles.delete([profile_id])
        activity.logger.info("profile %s deleted (node %s)", profile_id, self.node)


def _view(profile: BrowserProfile, mark: Mark, *, open: bool) -> ProfileView:
    return ProfileView(id=profile.id, slot=mark.slot, node=mark.node, open=open)


def _refused(exc: LocalApiError) -> NodeOpenResult:
    return NodeOpenResult(open=False, reason=f"{exc.error_type.value}: {exc.detail}")


def _node_trouble(exc: ProviderError) -> NodeOpenResult:
    return NodeOpenResult(
        open=False, reason=f"{exc.error_type.value}: {exc.detail}", node_trouble=True
    )


def _refused_or_raise(exc: LocalApiError) -> NodeOpenResult:
    """The profile's own trouble is an answer; the node's key or budget is raised; a busy
    or old desktop client, an account out of balance or at its window cap are answered as
    the node's trouble (not the profile's)."""
    if isinstance(exc, _NODE_TROUBLE):
        raise exc
    if isinstance(exc, _ACCOUNT_TROUBLE) or _WINDOW_CAP in exc.raw_msg:
        return _node_trouble(exc)
    if isinstance(exc, LocalApiUnavailableError) and _FAILED_TO_START not in exc.raw_msg:
        return _node_trouble(exc)
    return _refused(exc)
