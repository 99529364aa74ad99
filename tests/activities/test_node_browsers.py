"""A node worker's BrowserPool activities against the BitBrowser emulator, in process.

Two nodes of one account (profiles are account-wide, browsers per node); each
test drives the activities through `ActivityEnvironment` and checks the
emulator's ground truth (`/_emulator/stats`, `/_emulator/secrets`) and the calls
the client sent (`Recorder`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devicepool.activities.errors import RateLimitedError
from devicepool.activities.node_browsers import NodeBrowserActivities
from devicepool.activities.node_models import (
    NodeCreateInput,
    NodeDeleteInput,
    NodeListInput,
    NodeOpenInput,
    NodeOpenResult,
    ProfileView,
)
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.activities.providers.bitbrowser.profile_provider import (
    BitBrowserProfiles,
    parse_mark,
    profile_mark,
)
from devicepool.activities.providers.profiles import NewProfile, ProfileProvider, UnfitProfile
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import ProxyPoolSettings
from devicepool.api.errors import ErrorType
from tests.activities.conftest import LostAnswer, bitbrowser_account
from tests.helpers.bitbrowser import KEY, Account
from tests.helpers.bitbrowser_client import Recorder

SPEED = 20.0
PROXY_PASSWORD = "node-proxy-pass-R4t9"
PROXY_POOLS = {
    "gw": ProxyPoolSettings(
        name="gw",
        type="socks5",
        host="gw.proxy.example",
        port=1080,
        username_template="u-{session}-ttl-{ttl}",
        password=SecretStr(PROXY_PASSWORD),
    )
}


class Counting(httpx.AsyncBaseTransport):
    """Counts the `/browser/open` calls in flight at once (the most seen)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.in_flight = 0
        self.most = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        opening = request.url.path == "/browser/open"
        if opening:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            return await self.inner.handle_async_request(request)
        finally:
            if opening:
                self.in_flight -= 1


class NodeUnderTest:
    def __init__(self, account: Account, name: str, *, timeout: float = 5.0) -> None:
        self.counting = Counting(account.transports[name])
        self.recorder = Recorder(self.counting)
        api = LocalApi(
            base_url=f"http://{name}.local",
            api_key=account.key,
            timeout=timeout,
            transport=self.recorder,
            scrubber=Scrubber.of(proxy_pools=PROXY_POOLS.values()),
        )
        self.provider = BitBrowserProfiles(
            BrowserProfiles(api, settle_seconds=0.0), closing_wait_seconds=2.0
        )
        self.activities = NodeBrowserActivities(self.provider, node=name, proxy_pools=PROXY_POOLS)
        self.env = ActivityEnvironment()

    async def run(self, fn: Callable[..., Any], arg: Any) -> Any:
        return await self.env.run(fn, arg)

    async def create(self, pool: str, slot: str, **kwargs: Any) -> Any:
        return await self.run(
            self.activities.node_create_profile, NodeCreateInput(pool=pool, slot=slot, **kwargs)
        )

    async def list(self, pool: str) -> Any:
        return (
            await self.run(self.activities.node_list_profiles, NodeListInput(pool=pool))
        ).profiles

    async def open(self, profile_id: str) -> Any:
        return await self.run(self.activities.node_open_profile, NodeOpenInput(id=profile_id))

    async def delete(self, profile_id: str) -> Any:
        return await self.run(self.activities.node_delete_profile, NodeDeleteInput(id=profile_id))


account = bitbrowser_account(nodes=["node-1", "node-2"], speed=SPEED, seed=11)


@pytest.fixture
async def nodes(account: Account) -> AsyncIterator[dict[str, NodeUnderTest]]:
    made = {name: NodeUnderTest(account, name) for name in ("node-1", "node-2")}
    yield made
    for n in made.values():
        await n.activities.aclose()


def test_the_mark_names_pool_slot_and_node_and_reads_back() -> None:
    mark = profile_mark("pool-a", "3", "node-2")
    assert mark == "devicepool pool=pool-a slot=3 node=node-2"
    found = parse_mark(mark)
    assert found is not None and (found.pool, found.slot, found.node) == ("pool-a", "3", "node-2")
    assert parse_mark("someone's own profile") is None
    with pytest.raises(ValueError, match="slot"):
        profile_mark("pool-a", "3 4", "node-2")


async def test_create_after_a_lost_answer_is_found_not_made_twice(
    account: Account, lost_answer: LostAnswer
) -> None:
    node = NodeUnderTest(account, "node-1", timeout=0.5)
    node.recorder.before, sent = lost_answer("/browser/update", "remark")
    try:
        first = await node.create("pool-a", "0", proxy_pool="gw", session_ttl_seconds=600)
        node.recorder.before = None
        again = await node.create("pool-a", "0", proxy_pool="gw", session_ttl_seconds=600)
    finally:
        await node.activities.aclose()
    stats = await account.stats()
    assert sent == ["devicepool pool=pool-a slot=0 node=node-1"]  # one create, its answer lost
    assert stats["creates"] == 1 and stats["profiles"]["total"] == 1
    assert first.id == again.id and (first.slot, first.node, first.open) == ("0", "node-1", False)
    # The proxy came from the node's config; the username carries a per-slot session.
    (body,) = node.recorder.bodies("/browser/update")
    assert body["host"] == "gw.proxy.example" and body["port"] == 1080
    assert body["proxyUserName"].startswith("u-") and body["proxyUserName"].endswith("-ttl-600")


async def test_a_duplicate_mark_keeps_the_oldest_and_deletes_the_rest(
    account: Account, nodes: dict[str, NodeUnderTest]
) -> None:
    mark = profile_mark("pool-d", "1", "node-1")
    older = await nodes["node-1"].provider.profiles.create(mark=mark)
    await nodes["node-1"].provider.profiles.create(mark=mark)  # a blind retry's second
    view = await nodes["node-1"].create("pool-d", "1")
    assert view.id == older
    assert [p.id for p in await nodes["node-1"].list("pool-d")] == [older]


async def test_the_list_shows_every_nodes_profiles_with_placement_and_open(
    nodes: dict[str, NodeUnderTest],
) -> None:
    a = await nodes["node-1"].create("pool-l", "0")
    b = await nodes["node-2"].create("pool-l", "1")
    await nodes["node-1"].create("pool-other", "0")
    assert (await nodes["node-1"].open(a.id)).open is True

    from_1 = {(p.id, p.slot, p.node, p.open) for p in await nodes["node-1"].list("pool-l")}
    from_2 = {(p.id, p.slot, p.node, p.open) for p in await nodes["node-2"].list("pool-l")}
    assert from_1 == {(a.id, "0", "node-1", True), (b.id, "1", "node-2", False)}
    # Account-wide listing; `open` is what each node's own Local API says.
    assert from_2 == {(a.id, "0", "node-1", False), (b.id, "1", "node-2", False)}
    # A profile open on another node is not opened here (nor reset there).
    elsewhere = await nodes["node-2"].open(a.id)
    assert elsewhere.open is False and "invalid_state" in elsewhere.reason
    assert (await nodes["node-1"].list("pool-l"))[0].open is True


async def test_one_open_in_flight_per_node(
    account: Account, nodes: dict[str, NodeUnderTest]
) -> None:
    node = nodes["node-1"]
    ids = [(await node.create("pool-o", str(slot))).id for slot in range(4)]
    results = await asyncio.gather(*(node.open(i) for i in ids))
    assert [r.open for r in results] == [True] * 4
    assert node.counting.most == 1
    assert all(body.get("queue") is True for body in node.recorder.bodies("/browser/open"))
    stats = await account.stats()
    assert stats["profiles"]["open"] == 4


async def test_a_profile_stuck_opening_is_reset_and_opened_once_more(
    account: Account, nodes: dict[str, NodeUnderTest]
) -> None:
    node = nodes["node-1"]
    view = await node.create("pool-s", "0")
    await account.faults(openStuckRate=1.0)
    stuck = await node.open(view.id)
    assert stuck.open is False and stuck.reason.startswith("server_error")
    await account.faults()
    node.recorder.calls.clear()
    assert (await node.open(view.id)).open is True
    paths = [path for path, _ in node.recorder.calls]
    assert paths[0] == "/browser/open" and "/browser/closing/reset" in paths
    assert paths[-1] == "/browser/open"
    assert (await account.stats())["profiles"]["open"] == 1


async def test_delete_closes_and_confirms_before_deleting_and_gone_is_success(
    account: Account, nodes: dict[str, NodeUnderTest]
) -> None:
    node = nodes["node-1"]
    view = await node.create("pool-x", "0")
    assert (await node.open(view.id)).open is True
    node.recorder.calls.clear()
    await node.delete(view.id)
    paths = [path for path, _ in node.recorder.calls]
    assert paths[0] == "/browser/close"
    assert paths[-1] == "/browser/delete/ids"
    # The delete came only after pids/alive no longer listed the browser.
    alive_answers = [p for p in paths if p == "/browser/pids/alive"]
    assert alive_answers, paths
    assert await node.list("pool-x") == []
    await node.delete(view.id)  # already gone: success
    stats = await account.stats()
    assert stats["deletes"] == 1 and stats["profiles"]["total"] == 0


async def test_errors_are_classified_and_nothing_returned_holds_a_secret(
    account: Account, nodes: dict[str, NodeUnderTest]
) -> None:
    node = nodes["node-1"]
    view = await node.create("pool-z", "0", proxy_pool="gw", session_ttl_seconds=60)
    await node.provider.profiles.api.call(
        "/browser/update/partial",
        {"ids": [view.id], "password": "acct-pass-W2e", "cookie": "sid=cookie-value-P0o"},
    )
    returned: list[Any] = [view, *(await node.list("pool-z")), await node.open(view.id)]

    errors: list[ApplicationError] = []
    with pytest.raises(ApplicationError) as unknown_pool:
        await node.create("pool-z", "1", proxy_pool="nowhere")
    errors.append(unknown_pool.value)
    assert unknown_pool.value.type == "unknown_proxy_pool" and unknown_pool.value.non_retryable

    # Node 2 cannot close a browser open on node 1: a classified, non-retryable refusal.
    with pytest.raises(ApplicationError) as elsewhere:
        await nodes["node-2"].delete(view.id)
    errors.append(elsewhere.value)
    assert elsewhere.value.type == "invalid_state" and elsewhere.value.non_retryable

    await account.control("node", {"up": False}, node="node-1")
    with pytest.raises(ApplicationError) as down:
        await node.list("pool-z")
    errors.append(down.value)
    assert not down.value.non_retryable
    await account.control("node", {"up": True}, node="node-1")

    secrets = (await account.http["node-1"].get("/_emulator/secrets")).json()["secrets"]
    assert PROXY_PASSWORD in secrets
    shown = " ".join(
        [m.model_dump_json() for m in returned]
        + [f"{e} {e.details!r} {e.type}" for e in errors]
        + [repr(node.activities)]
    )
    for secret in [*secrets, KEY]:
        assert secret not in shown


# Issue 38: browser profiles are a provider behind the seam. The node activities took a
# `BrowserProfiles` (the Local API's client) and held the marks, the resets and the one
# open at a time themselves; now any `ProfileProvider` serves them, and what they send it
# is the slot's placement and a resolved proxy, never the transport's shape.


class FakeProfiles:
    """A `ProfileProvider` in memory: records what it is asked, answers what it is told."""

    def __init__(self) -> None:
        self.made: list[NewProfile] = []
        self.removed: list[str] = []

    async def list_pool(self, pool: str) -> list[ProfileView]:
        return [ProfileView(id=f"{pool}-p0", slot="0", node="node-9", open=True)]

    async def create_profile(self, new: NewProfile) -> ProfileView:
        self.made.append(new)
        return ProfileView(id="p1", slot=new.slot, node=new.node)

    async def open_profile(self, profile_id: str) -> NodeOpenResult:
        return NodeOpenResult(open=False, reason="busy", node_trouble=True)

    async def close_profile(self, profile_id: str) -> None:
        return None

    async def remove_profile(self, profile_id: str) -> None:
        self.removed.append(profile_id)
        raise RateLimitedError(ErrorType.RATE_LIMITED, 429, "slow down", retry_after=3.0)

    async def health(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_the_node_activities_serve_any_profile_provider() -> None:
    provider = FakeProfiles()
    seam: ProfileProvider = provider
    acts = NodeBrowserActivities(seam, node="node-3", proxy_pools=PROXY_POOLS)
    env = ActivityEnvironment()
    listed = await env.run(acts.node_list_profiles, NodeListInput(pool="pool-f"))
    assert [(p.id, p.node, p.open) for p in listed.profiles] == [("pool-f-p0", "node-9", True)]
    made = await env.run(
        acts.node_create_profile,
        NodeCreateInput(pool="pool-f", slot="2", proxy_pool="gw", session_ttl_seconds=60),
    )
    assert (made.id, made.slot, made.node) == ("p1", "2", "node-3")
    (new,) = provider.made
    assert (new.pool, new.slot, new.node) == ("pool-f", "2", "node-3")
    assert new.proxy is not None and new.proxy.host == "gw.proxy.example"
    assert PROXY_PASSWORD not in repr(new)
    opened = await env.run(acts.node_open_profile, NodeOpenInput(id="p1"))
    assert opened.node_trouble and not opened.open
    with pytest.raises(ApplicationError) as refused:
        await env.run(acts.node_delete_profile, NodeDeleteInput(id="p1"))
    assert refused.value.type == "rate_limited" and not refused.value.non_retryable
    assert provider.removed == ["p1"]


async def test_a_provider_answer_that_fails_validation_is_not_a_refused_argument() -> None:
    """Review of the port, finding 3: `except ValueError` wrapped the whole create, so any
    ValueError inside the provider (a pydantic ValidationError from a malformed Local API
    answer) came back as non-retryable `invalid_argument`, as if the pool's name were
    unfit. Only `UnfitProfile` (no mark can hold the pool, slot or node) is refused so."""

    class Malformed(FakeProfiles):
        async def create_profile(self, new: NewProfile) -> ProfileView:
            raise ValueError("bad answer")

    env = ActivityEnvironment()
    acts = NodeBrowserActivities(Malformed(), node="node-3")
    with pytest.raises(ValueError, match="bad answer"):
        await env.run(acts.node_create_profile, NodeCreateInput(pool="pool-f", slot="0"))

    class Unfit(FakeProfiles):
        async def create_profile(self, new: NewProfile) -> ProfileView:
            raise UnfitProfile("the mark is over 50 characters")

    acts = NodeBrowserActivities(Unfit(), node="node-3")
    with pytest.raises(ApplicationError) as refused:
        await env.run(acts.node_create_profile, NodeCreateInput(pool="pool-f", slot="0"))
    assert refused.value.type == ErrorType.INVALID_ARGUMENT.value and refused.value.non_retryable


async def test_deleting_a_duplicate_is_logged_with_the_activity_it_ran_in(
    account: Account, nodes: dict[str, NodeUnderTest], caplog: pytest.LogCaptureFixture
) -> None:
    """Review of the port, finding 4: the adapter logged to a module logger, so "deleting
    duplicate profiles" lost the workflow and activity ids every activity log line has."""
    mark = profile_mark("pool-l", "1", "node-1")
    await nodes["node-1"].provider.profiles.create(mark=mark)
    await nodes["node-1"].provider.profiles.create(mark=mark)  # a blind retry's second
    with caplog.at_level(logging.INFO):
        await nodes["node-1"].create("pool-l", "1")
    [record] = [r for r in caplog.records if "deleting duplicate profiles" in r.getMessage()]
    assert record.__dict__.get("temporal_activity", {}).get("activity_type"), record.__dict__
