"""What an `api: bitbrowser` account cannot serve is a reference problem the pool shows at once:
an iOS pool, a pool without a proxy or whose proxy pool has no username or password."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, CheckRefsInput, ProxyPoolSettings
from devicepool.activities.providers.bitbrowser.phone_provider import ANDROID_ONLY, PROXY_NEEDED
from devicepool.workflows.pool.status import refs_problem


@pytest.fixture
async def activities() -> AsyncIterator[DeviceActivities]:
    acts = DeviceActivities(
        accounts={
            "phones": AccountSettings(
                name="phones",
                api="bitbrowser",
                base_url="http://phones.local",
                api_key=SecretStr("k"),
            ),
            "rest": AccountSettings(
                name="rest", base_url="http://rest.local", api_key=SecretStr("k")
            ),
        },
        proxy_pools={
            "gw": ProxyPoolSettings(name="gw", host="gw.test", port=1080, password=SecretStr("p")),
            "open": ProxyPoolSettings(name="open", host="open.test", port=1080),
            "anon": ProxyPoolSettings(
                name="anon", host="anon.test", port=1080, username_template=""
            ),
        },
    )
    yield acts
    await acts.aclose()


async def test_ios_on_a_local_api_account_is_refused_naming_android_only(
    activities: DeviceActivities,
) -> None:
    refused = await activities.check_pool_refs(
        CheckRefsInput(account="phones", platform="ios", region="d69bcf13", proxy_pool="gw")
    )
    assert refused.problems == [f"platform ios: {ANDROID_ONLY} (providerCredentialRef 'phones')"]
    reason, message = refs_problem(refused.problems)
    assert reason == "UnsupportedPlatform" and ANDROID_ONLY in message
    # Android there, and iOS at a REST provider, are fine; the Local API's regions are not
    # checked (it lists none).
    for account, platform in (("phones", "android"), ("rest", "ios")):
        fine = await activities.check_pool_refs(
            CheckRefsInput(account=account, platform=platform, proxy_pool="gw")
        )
        assert fine.problems == []
    android = await activities.check_pool_refs(
        CheckRefsInput(
            account="phones", platform="android", region="any-compute-type", proxy_pool="gw"
        )
    )
    assert android.problems == []


async def test_a_phone_pool_whose_proxy_the_local_api_would_refuse_stops_before_any_create(
    activities: DeviceActivities,
) -> None:
    def check(proxy_pool: str | None, account: str = "phones") -> CheckRefsInput:
        return CheckRefsInput(account=account, platform="android", proxy_pool=proxy_pool)

    # `/phone/profile/add` requires proxyUserName and proxyPassword: said before any create.
    [none] = (await activities.check_pool_refs(check(None))).problems
    assert none == f"{PROXY_NEEDED}: set spec.proxy.poolRef"
    [open_] = (await activities.check_pool_refs(check("open"))).problems
    assert open_ == (
        "proxy pool 'open' has no password (passwordFile or passwordEnv) in the worker "
        f"config: {PROXY_NEEDED}"
    )
    [anon] = (await activities.check_pool_refs(check("anon"))).problems
    assert "no username (usernameTemplate)" in anon
    for problems in ([none], [open_], [anon]):
        reason, message = refs_problem(problems)
        assert reason == "ProxyIncomplete" and message.endswith("provisioning stopped")
    # An unknown proxy pool is said once, as unknown; a REST account takes any proxy, or none.
    [unknown] = (await activities.check_pool_refs(check("nope"))).problems
    assert refs_problem([unknown])[0] == "UnknownProxyPool"
    for proxy_pool in (None, "open", "anon"):
        assert (await activities.check_pool_refs(check(proxy_pool, "rest"))).problems == []
