"""An iOS pool on an `api: bitbrowser` account is a reference problem the pool shows at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import AccountSettings, CheckRefsInput
from devicepool.activities.providers.bitbrowser.phone_provider import ANDROID_ONLY
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
        proxy_pools={},
    )
    yield acts
    await acts.aclose()


async def test_ios_on_a_local_api_account_is_refused_naming_android_only(
    activities: DeviceActivities,
) -> None:
    refused = await activities.check_pool_refs(
        CheckRefsInput(account="phones", platform="ios", region="d69bcf13")
    )
    assert refused.problems == [f"platform ios: {ANDROID_ONLY} (providerCredentialRef 'phones')"]
    reason, message = refs_problem(refused.problems)
    assert reason == "UnsupportedPlatform" and ANDROID_ONLY in message
    # Android there, and iOS at a REST provider, are fine; the Local API's regions are not
    # checked (it lists none).
    for account, platform in (("phones", "android"), ("rest", "ios")):
        fine = await activities.check_pool_refs(CheckRefsInput(account=account, platform=platform))
        assert fine.problems == []
    android = await activities.check_pool_refs(
        CheckRefsInput(account="phones", platform="android", region="any-compute-type")
    )
    assert android.problems == []
