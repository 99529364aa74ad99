"""Whatever JSON a Local API call gets, the BitBrowser emulator answers it in its envelope: a
bad body is a refusal in Chinese, never a crash (an HTTP 500)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.emulator.bitbrowser import BitBrowserConfig, BitBrowserEmulator
from devicepool.emulator.bitbrowser._envelope import LocalApiError
from devicepool.emulator.bitbrowser.state import ROUTES
from tests.helpers.bitbrowser import CJK, phone_body, profile_body

KEYS = [
    *("id", "ids", "page", "pageSize", "name", "remark", "groupId", "groupName", "sortNum"),
    *("seq", "minSeq", "proxyMethod", "proxyType", "port", "host", "browserFingerPrint"),
    *("browserIds", "phoneIds", "regionId", "computeType", "proxyUserName", "proxyPassword"),
    *("queue", "remarkType", "udp", "cloudPhonesFingerPrint", "sort", "cookie"),
]


async def _account() -> tuple[BitBrowserEmulator, list[str]]:
    """An account with a profile, a group and a phone of each family; their ids."""
    emulator = BitBrowserEmulator(
        BitBrowserConfig(open_seconds=0, seed=1, phone_requests_per_second=10**6)
    )
    node = emulator.nodes["node-1"]
    profile = await emulator.call(node, "/browser/update", profile_body())
    group = await emulator.call(node, "/group/add", {"groupName": "g"})
    phone = await emulator.call(node, "/phone/profile/add", phone_body())
    phone_group = await emulator.call(node, "/phone/group/add", {"groupName": "g"})
    return emulator, [profile["id"], group["id"], phone["id"], phone_group["id"]]


IDS = asyncio.run(_account())[1]  # the same for every example: the ids come from the seed
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 200),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.sampled_from(IDS),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner),
    max_leaves=5,
)
bodies = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)


@settings(max_examples=250, deadline=None)
@given(path=st.sampled_from(ROUTES), body=bodies)
def test_any_body_is_an_answer_or_a_chinese_refusal(path: str, body: dict[str, Any]) -> None:
    asyncio.run(_call(path, body))


async def _call(path: str, body: dict[str, Any]) -> None:
    emulator, _ = await _account()
    try:
        await emulator.call(emulator.nodes["node-1"], path, body)
    except LocalApiError as error:
        assert error.status == 200 and CJK.search(error.msg), error.msg
    # Whatever happened, the account can still be listed and counted.
    emulator.stats()
    await emulator.call(emulator.nodes["node-1"], "/browser/list", {"page": 0})
