"""Contract tests: the Local API client's browser family against the BitBrowser emulator.

The client was written from the vendor's documentation, the emulator apart from
it; each test drives one documented habit through the client's public surface
and checks the emulator's ground truth (`/_emulator/stats`, `/_emulator/secrets`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from devicepool.activities.errors import (
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    TransportTimeoutError,
)
from devicepool.activities.providers.bitbrowser import (
    MAX_IDS_PER_CALL,
    BrowserProfile,
    CloseUnconfirmedError,
    LocalApiAuthError,
    LocalApiBusyError,
    LocalApiInvalidError,
    LocalApiNotFoundError,
    LocalApiUnsupportedError,
    ProfileProxy,
    Refusal,
)
from devicepool.api.errors import ErrorType
from devicepool.emulator.bitbrowser import BitBrowserConfig
from tests.activities.conftest import LostAnswer, bitbrowser_account
from tests.helpers.bitbrowser import CJK, KEY, Account
from tests.helpers.bitbrowser_client import Node, node

# Every virtual duration (launch 1 s, close linger 3 s) runs 20 times faster.
SPEED = 20.0
PROXY = ProfileProxy(
    type="socks5",
    host="gw.proxy.example",
    port=1080,
    username="user-1",
    password="proxy-pass-7Hq2",
)


account = bitbrowser_account(nodes=["node-1", "node-2"], speed=SPEED, seed=7)


@pytest.fixture
async def n1(account: Account) -> AsyncIterator[Node]:
    client = node(account, "node-1")
    yield client
    await client.aclose()


async def _opened(account: Account, n: Node, mark: str, *, speed: float) -> str:
    """A profile created and opened, the account's clock at `speed` (a closed process
    lingers 3 s of virtual time)."""
    await account.control("clock", {"speed": speed})
    profile_id = await _create(n, mark)
    await n.profiles.open(profile_id)
    return profile_id


async def _create(n: Node, mark: str, **kwargs: Any) -> str:
    return await n.profiles.create(mark=mark, proxy=PROXY, **kwargs)


# ------------------------------------------------------------ envelope and auth


async def test_health_answers_without_data(n1: Node) -> None:
    await n1.api.health()
    assert n1.recorder.calls == [("/health", {})]


@pytest.mark.parametrize("refusal_status", [403, 200])
@pytest.mark.parametrize("key", [None, "wrong-key-9d1f"])
async def test_a_refused_key_is_unauthenticated_whatever_the_status(
    key: str | None, refusal_status: int
) -> None:
    account = Account(
        BitBrowserConfig(api_key=KEY, auth_refusal_status=refusal_status, speed=SPEED)
    )
    client = node(account, key=key)
    try:
        with pytest.raises(LocalApiAuthError) as caught:
            await client.api.health()
    finally:
        await client.aclose()
        await account.aclose()
    error = caught.value
    assert error.error_type is ErrorType.UNAUTHENTICATED and not error.retryable
    assert error.refusal is Refusal.AUTH
    assert CJK.search(error.raw_msg), error.raw_msg
    assert error.status == refusal_status
    for text in (str(error), repr(error), error.raw_msg):
        assert KEY not in text
        assert key is None or key not in text


async def test_the_key_is_sent_per_call_and_never_shown(account: Account) -> None:
    client = node(account)
    try:
        await client.api.health()
        assert KEY not in repr(client.api) and KEY not in str(client.api)
        assert KEY not in repr(client.profiles) and KEY not in repr(client.phones)
    finally:
        await client.aclose()


async def test_refusals_are_typed_and_keep_the_vendor_text(n1: Node) -> None:
    with pytest.raises(LocalApiNotFoundError) as missing:
        await n1.profiles.get("0123456789abcdef0123456789abcdef")
    assert isinstance(missing.value, NotFoundError)
    assert missing.value.refusal is Refusal.NOT_FOUND
    assert CJK.search(missing.value.raw_msg)
    assert missing.value.raw_msg in str(missing.value)

    # A body the desktop client refuses: a list without its page.
    with pytest.raises(LocalApiInvalidError) as invalid:
        await n1.api.call("/browser/list", {"pageSize": 10})
    assert isinstance(invalid.value, InvalidArgumentError) and not invalid.value.retryable
    assert CJK.search(invalid.value.raw_msg)


async def test_an_unknown_path_is_unsupported_never_not_found(n1: Node) -> None:
    # "Not found" reads as "the profile is gone" to a caller tearing down: an unknown
    # call must never be mistaken for it.
    with pytest.raises(LocalApiUnsupportedError) as caught:
        await n1.api.call("/browser/list/concise", {"page": 0, "pageSize": 10})
    assert not isinstance(caught.value, NotFoundError)
    assert caught.value.error_type is ErrorType.INVALID_ARGUMENT


async def test_a_node_whose_desktop_client_is_down_is_a_retryable_server_error(
    account: Account, n1: Node
) -> None:
    await account.control("node", {"up": False})
    with pytest.raises(ServerError) as caught:
        await n1.api.health()
    assert caught.value.retryable and caught.value.status == 503


async def test_injected_500s_and_busy_refusals_are_retryable(account: Account, n1: Node) -> None:
    await account.faults(serverErrorRate=1.0)
    with pytest.raises(ServerError) as server:
        await n1.profiles.list_page(0)
    assert server.value.status == 500 and server.value.retryable
    await account.faults(failureRate=1.0)
    with pytest.raises(ServerError) as busy:
        await n1.profiles.list_page(0)
    assert busy.value.retryable and CJK.search(getattr(busy.value, "raw_msg", ""))


# ------------------------------------------------------------ create, mark, update


async def test_find_by_mark_is_exact_though_the_remark_filter_is_fuzzy(n1: Node) -> None:
    ids = {mark: await _create(n1, mark) for mark in ("pool-a/1", "pool-a/10", "pool-a/11")}
    found = await n1.profiles.find_by_mark("pool-a/1")
    assert [p.id for p in found] == [ids["pool-a/1"]]
    # The server's filter alone answers all three: the exactness is the client's.
    assert n1.recorder.bodies("/browser/list")[-1]["remark"] == "pool-a/1"
    page = await n1.profiles.list_page(0, remark="pool-a/1")
    assert len(page.items) == 3
    assert await n1.profiles.find_by_mark("pool-a/2") == []


async def test_a_create_whose_answer_was_lost_is_found_not_made_twice(
    account: Account, n1: Node, lost_answer: LostAnswer
) -> None:
    client = node(account, timeout=0.5)
    client.recorder.before, made = lost_answer("/browser/update", "remark")
    try:
        result = await client.profiles.create_marked(mark="pool-a/slot-3", proxy=PROXY)
    finally:
        await client.aclose()
    stats = await account.stats()
    assert made == ["pool-a/slot-3"]  # one create was sent, its answer lost
    assert result.created is False and result.duplicates == []
    assert stats["creates"] == 1 and stats["duplicates"] == {"byName": {}, "byRemark": {}}
    assert [p.id for p in await n1.profiles.find_by_mark("pool-a/slot-3")] == [result.id]


async def test_a_blind_retry_after_a_lost_answer_makes_a_duplicate(account: Account) -> None:
    # The habit the look-up exists for: without it, the same create twice is two profiles.
    client = node(account, timeout=0.5)
    try:
        await account.faults(timeoutRate=1.0, timeoutSeconds=30)
        with pytest.raises(TransportTimeoutError) as lost:
            await client.profiles.create(mark="pool-a/slot-4", proxy=PROXY)
        assert lost.value.retryable
        await account.faults()
        await client.profiles.create(mark="pool-a/slot-4", proxy=PROXY)
        twice = await client.profiles.create_marked(mark="pool-a/slot-4", proxy=PROXY)
    finally:
        await client.aclose()
    stats = await account.stats()
    assert stats["creates"] == 2 and stats["duplicates"]["byRemark"] == {"pool-a/slot-4": 2}
    # Found, not made a third time; the second one is named for removal.
    assert twice.created is False and len(twice.duplicates) == 1


async def test_create_marked_makes_one_and_then_finds_it(account: Account, n1: Node) -> None:
    first = await n1.profiles.create_marked(mark="pool-b/0", name="pool-b 0", proxy=PROXY)
    again = await n1.profiles.create_marked(mark="pool-b/0", proxy=PROXY)
    assert first.created is True and again.created is False and again.id == first.id
    (profile,) = await n1.profiles.find_by_mark("pool-b/0")
    assert (profile.name, profile.remark, profile.host, profile.port) == (
        "pool-b 0",
        "pool-b/0",
        PROXY.host,
        PROXY.port,
    )
    assert (await account.stats())["creates"] == 1


async def test_a_refused_create_is_raised_not_retried(account: Account, n1: Node) -> None:
    with pytest.raises(LocalApiNotFoundError):
        await n1.profiles.create_marked(mark="pool-c/0", group_id="no-such-group", proxy=PROXY)
    assert len(n1.recorder.bodies("/browser/update")) == 1
    assert (await account.stats())["creates"] == 0


async def test_partial_update_changes_only_its_fields_and_replace_needs_the_whole_record(
    n1: Node,
) -> None:
    profile_id = await _create(n1, "pool-d/0")
    await n1.api.call("/browser/update/partial", {"ids": [profile_id], "name": "renamed"})
    after = await n1.profiles.get(profile_id)
    assert (after.name, after.remark, after.host) == ("renamed", "pool-d/0", PROXY.host)

    with pytest.raises(LocalApiInvalidError) as partial:
        await n1.api.call("/browser/update", {"id": profile_id, "name": "only a name"})
    assert "/browser/update/partial" in partial.value.raw_msg
    assert PROXY.password.get_secret_value() not in str(partial.value)
    assert (await n1.profiles.get(profile_id)).name == "renamed"  # nothing replaced


# ------------------------------------------------------------ open, close, reset


async def test_open_answers_the_debugging_addresses(n1: Node) -> None:
    profile_id = await _create(n1, "pool-e/0")
    opened = await n1.profiles.open(profile_id)
    assert n1.recorder.bodies("/browser/open")[-1] == {"id": profile_id, "queue": True}
    assert opened.id == profile_id and opened.pid and opened.core_version
    assert opened.ws.startswith("ws://")
    assert "://" not in opened.http and opened.http.rpartition(":")[2].isdigit()
    assert await n1.profiles.alive([profile_id]) == {profile_id: opened.pid}


async def test_close_answers_before_the_process_is_gone_and_confirm_waits_for_it(
    account: Account, n1: Node
) -> None:
    profile_id = await _opened(account, n1, "pool-e/1", speed=2)  # lingers 1.5 s after close
    await n1.profiles.close(profile_id)
    # The race: close said yes, the process lives on (and a delete is refused meanwhile).
    assert profile_id in await n1.profiles.alive([profile_id])
    with pytest.raises(LocalApiBusyError) as busy:
        await n1.profiles.delete([profile_id])
    assert busy.value.refusal is Refusal.BUSY and "关闭中" in busy.value.raw_msg

    await n1.profiles.close_and_confirm(profile_id, wait_seconds=5, poll_seconds=0.02)
    assert await n1.profiles.alive([profile_id]) == {}
    await n1.profiles.delete([profile_id])
    assert (await account.stats())["profiles"]["total"] == 0


async def test_a_close_not_confirmed_in_time_is_a_retryable_error(
    account: Account, n1: Node
) -> None:
    profile_id = await _opened(account, n1, "pool-e/2", speed=1)  # lingers 3 s after close
    with pytest.raises(CloseUnconfirmedError) as caught:
        await n1.profiles.close_and_confirm(profile_id, wait_seconds=0.0, poll_seconds=0.01)
    assert caught.value.retryable and profile_id in str(caught.value)


async def test_a_second_open_without_queue_is_busy_and_with_queue_waits(
    account: Account, n1: Node
) -> None:
    await account.control("clock", {"speed": 2})  # a launch takes half a second
    first, second, third = [await _create(n1, f"pool-f/{i}") for i in range(3)]
    opening = asyncio.create_task(n1.profiles.open(first))
    await _until_opening(account)
    with pytest.raises(LocalApiBusyError) as busy:
        await n1.profiles.open(second, queue=False)
    assert CJK.search(busy.value.raw_msg) and not busy.value.retryable
    queued = await n1.profiles.open(third)  # queue: true by default
    assert (await opening).pid and queued.pid


async def _until_opening(account: Account) -> None:
    for _ in range(500):
        if (await account.stats())["profiles"]["opening"]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the first open never reached the emulator")


async def test_a_profile_stuck_closing_opens_again_after_reset(account: Account, n1: Node) -> None:
    profile_id = await _create(n1, "pool-g/0")
    await n1.profiles.open(profile_id)
    await account.control(f"browsers/{profile_id}/kill", {"stuck": True})
    with pytest.raises(LocalApiBusyError):
        await n1.profiles.open(profile_id)
    assert await n1.profiles.alive([profile_id]) == {}  # gone, though the state says closing
    await n1.profiles.reset_closing(profile_id)
    assert (await n1.profiles.open(profile_id)).pid
    assert (await account.stats())["resets"] == 1


async def test_a_profile_open_on_another_node_is_busy_there(account: Account, n1: Node) -> None:
    n2 = node(account, "node-2")
    try:
        profile_id = await _create(n1, "pool-h/0")
        # Profiles belong to the account: node-2 lists what node-1 made.
        assert [p.id for p in await n2.profiles.find_by_mark("pool-h/0")] == [profile_id]
        await n1.profiles.open(profile_id)
        with pytest.raises(LocalApiBusyError):
            await n2.profiles.open(profile_id)
        assert await n2.profiles.alive([profile_id]) == {}  # the process is node-1's
    finally:
        await n2.aclose()


# ------------------------------------------------------------ paging, listing, delete


async def test_listing_pages_by_100_from_0_and_delete_goes_in_chunks_of_100(
    account: Account, n1: Node
) -> None:
    made = [await _create(n1, f"pool-p/{i:03d}") for i in range(230)]
    for i in range(3):
        await _create(n1, f"other/{i}")

    listed = await n1.profiles.list_all(mark_prefix="pool-p/")
    assert sorted(p.id for p in listed) == sorted(made)
    pages = n1.recorder.bodies("/browser/list")
    assert [(b["page"], b["pageSize"]) for b in pages] == [(0, 100), (1, 100), (2, 100)]
    page = await n1.profiles.list_page(1)
    assert len(page.items) == 100 and page.total == 233
    with pytest.raises(ValueError):
        await n1.profiles.list_page(0, page_size=MAX_IDS_PER_CALL + 1)

    await n1.profiles.delete(made)
    chunks = n1.recorder.bodies("/browser/delete/ids")
    assert [len(b["ids"]) for b in chunks] == [100, 100, 30]
    assert (await account.stats())["profiles"]["total"] == 3
    assert await n1.profiles.list_all(mark_prefix="pool-p/") == []


async def test_list_all_of_a_group(account: Account, n1: Node) -> None:
    added = await n1.api.call("/group/add", {"groupName": "pool-q", "sortNum": 0})
    group_id = added["id"] if isinstance(added, dict) else added
    inside = {await _create(n1, f"pool-q/{i}", group_id=group_id) for i in range(3)}
    await _create(n1, "elsewhere/0")
    assert {p.id for p in await n1.profiles.list_all(group_id=group_id)} == inside
    assert {p.group_id for p in await n1.profiles.list_all(mark_prefix="pool-q/")} == {group_id}


async def test_a_server_that_ignores_page_stops_the_listing(n1: Node) -> None:
    for i in range(101):
        await _create(n1, f"pool-r/{i}")

    # A server that answers page 0 whatever `page` says would loop a listing for ever.
    original = n1.profiles.list_page

    async def page_zero(page: int, **kwargs: Any) -> Any:
        return await original(0, **kwargs)

    n1.profiles.list_page = page_zero  # type: ignore[method-assign]
    with pytest.raises(ServerError, match="repeated"):
        await n1.profiles.list_all()


# ------------------------------------------------------------ secrets


async def test_no_secret_reaches_a_returned_model(account: Account, n1: Node) -> None:
    profile_id = await _create(n1, "pool-s/0")
    await n1.api.call(
        "/browser/update/partial",
        {
            "ids": [profile_id],
            "password": "account-pass-Zk81",
            "cookie": '[{"name":"sid","value":"cookie-value-Qw3"}]',
            "faSecretKey": "JBSWY3DPEHPK3PXP",
            "userName": "someone@example.com",
        },
    )
    response = await account.http["node-1"].get("/_emulator/secrets")
    secrets = response.json()["secrets"]
    assert {"proxy-pass-7Hq2", "account-pass-Zk81", "JBSWY3DPEHPK3PXP"} <= set(secrets)

    returned: list[Any] = [
        await n1.profiles.get(profile_id),
        *(await n1.profiles.find_by_mark("pool-s/0")),
        *(await n1.profiles.list_all()),
        *(await n1.profiles.list_page(0)).items,
        await n1.profiles.open(profile_id),
    ]
    for model in returned:
        shown = " ".join((model.model_dump_json(), repr(model), str(model), str(model.model_extra)))
        for secret in secrets:
            assert secret not in shown, type(model).__name__
        assert not model.model_extra
    assert set(BrowserProfile.model_fields).isdisjoint(
        {"password", "cookie", "proxy_password", "fa_secret_key", "proxy_user_name"}
    )
