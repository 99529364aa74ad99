"""Issue 37 check: a BrowserPool open outlasts the node's own budget for it (no server).

The node's open may take `/browser/open` (180 s with `queue: true`), then for a profile
stuck opening or closing the wait for its browser to exit, `/browser/closing/reset` and
one more open. The workflow cut it at 90 s: a slow open became a failure, and three of
them deleted the profile with its cookies. A node that is gone is found by its heartbeat,
not by that deadline; and a timed-out open is not the profile's failure.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from devicepool.activities.errors import ProviderError, to_application_error
from devicepool.activities.node_models import NodeOpenResult
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.activities.providers.bitbrowser.profile_provider import BitBrowserProfiles
from devicepool.workflows.browserpool import calls
from tests.helpers.activity_errors import activity_error


def open_budget() -> float:
    """The longest a node's `node_open_profile` may run past its semaphore, by the defaults."""
    api = LocalApi(base_url="http://127.0.0.1:54345", api_key=None)
    node = BitBrowserProfiles(BrowserProfiles(api))
    call = api.timeout
    open_call = node.profiles.open_timeout
    # open; wait for the browser to exit (its last `pids/alive` may straddle the deadline);
    # reset; open again.
    return open_call + node._closing_wait + call + call + open_call


def test_the_open_deadline_outlasts_the_nodes_budget_for_an_open() -> None:
    scheduled = calls.NODE_OPEN
    assert scheduled.total_seconds() > open_budget(), (scheduled, open_budget())


def test_an_open_is_watched_by_its_heartbeat() -> None:
    beat = calls.NODE_OPEN_HEARTBEAT
    assert beat <= timedelta(seconds=60), beat


def _failed(cause: BaseException) -> ActivityError:
    return activity_error(cause, "node_open_profile", None)


def test_a_timed_out_or_refused_open_is_the_nodes_trouble_not_the_profiles() -> None:
    counts = calls.counts_against_profile
    timed_out = TimeoutError("timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    assert not counts(_failed(timed_out))
    assert not counts(_failed(ApplicationError("key refused", type="unauthenticated")))
    assert not counts(_failed(ApplicationError("slow down", type="rate_limited")))
    assert counts(_failed(ApplicationError("browser crashed", type="server_error")))


# Review of issue 37, defect 1: the node's own open ran out (the Local API client gave up
# after its open timeout: TransportTimeoutError, type `timeout`), the desktop client went
# away mid-open (`transport`), or it said it was busy (answered `open: false`): each
# counted as the profile's failure, and three of them deleted it, cookies and all.


async def _slow(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(5)
    return httpx.Response(200, json={"success": True, "data": {}})


async def _dropped(request: httpx.Request) -> httpx.Response:
    raise httpx.RemoteProtocolError("server disconnected without sending a response")


async def _busy(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"success": False, "msg": "系统繁忙，请稍后再试"})


async def _down(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, text="the BitBrowser client is not running")


async def _no_proxy(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"success": False, "msg": "请选择代理方式"})


async def _outcome(handler: Any) -> tuple[bool, str, bool]:
    """What the workflow makes of one open on a node whose Local API answers `handler`."""
    api = LocalApi(
        base_url="http://127.0.0.1:54345",
        api_key=None,
        timeout=1.0,
        transport=httpx.MockTransport(handler),
    )
    node = BitBrowserProfiles(BrowserProfiles(api, open_timeout=0.2))
    try:
        answer: NodeOpenResult | ActivityError = await node._open("p1")
    except ProviderError as exc:
        answer = _failed(to_application_error(exc))
    finally:
        await api.aclose()
    return calls.open_outcome(answer)


@pytest.mark.parametrize(
    "handler", [_slow, _dropped, _busy, _down], ids=["slow", "dropped", "busy", "http-503"]
)
async def test_a_slow_gone_or_busy_desktop_is_not_the_profiles_failure(handler: Any) -> None:
    ok, why, counted = await _outcome(handler)
    assert not ok and why, why
    assert not counted, why


async def test_a_refusal_of_the_profile_itself_still_counts() -> None:
    ok, why, counted = await _outcome(_no_proxy)
    assert not ok and counted, why


# Second review, defect 6: an older desktop client answers `/browser/closing/reset` with
# HTTP 404 (LocalApiUnsupportedError, type invalid_argument) after a stuck open; an
# account out of balance, or at its window cap, refuses every open. None is the profile's
# trouble, yet each counted: three, and the profile was deleted with its cookies (slot 0
# deleted and made again, over and over; maxUnhealthy never tripped).


async def _old_client(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path == "/browser/open":
        return httpx.Response(200, json={"success": False, "msg": "浏览器正在打开中"})
    if path == "/browser/closing/reset":
        return httpx.Response(404, text="Not Found")
    return httpx.Response(200, json={"success": True, "data": {}})


async def _no_balance(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"success": False, "msg": "账户余额不足，请充值"})


async def _window_cap(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"success": False, "msg": "最多同时打开5个窗口"})


@pytest.mark.parametrize(
    "handler",
    [_old_client, _no_balance, _window_cap],
    ids=["old-client-reset-404", "no-balance", "window-cap"],
)
async def test_an_old_client_or_an_account_refusal_is_not_the_profiles_failure(
    handler: Any,
) -> None:
    ok, why, counted = await _outcome(handler)
    assert not ok and why, why
    assert not counted, why
