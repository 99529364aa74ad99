"""The emulator's browser profile against the vendor's documentation: every documented field
of `/browser/detail`, and the documented defaults of a create that leaves a field out.

From the vendor's Local API documentation, "浏览器接口" (doc.bitbrowser.cn; the English
pages at doc.bitbrowser.net say the same): `/browser/update` documents `ipCheckService`
"default ip-api" and `allowedSignin` "default true"; the `/browser/detail` answer example
lists the fields below. A client written against the docs reads some of them (`lastIp`:
`models.BrowserProfile.last_ip`); an emulator that leaves them out lets such a client
pass its tests and fail on the real desktop client.
"""

from __future__ import annotations

from devicepool.activities.providers.bitbrowser.models import BrowserProfile
from tests.helpers.bitbrowser import Account, profile_body

# The top-level fields of the documented `/browser/detail` answer.
DOCUMENTED_DETAIL = frozenset(
    {
        "id", "seq", "platform", "platformIcon", "url", "name", "userName", "password",
        "cookie", "otherCookie", "isGlobalProxyInfo", "isIpv6", "proxyMethod", "proxyType",
        "agentId", "ipCheckService", "host", "port", "proxyUserName", "proxyPassword",
        "lastIp", "lastCountry", "isIpNoChange", "ip", "country", "province", "city",
        "dynamicIpUrl", "isDynamicIpChangeIp", "remark", "status", "operUserName",
        "isDelete", "delReason", "isMostCommon", "isRemove", "tempStr", "createdBy",
        "userId", "createdTime", "recycleBinRemark", "mainUserId", "abortImage",
        "abortMedia", "stopWhileNetError", "stopWhileCountryChange", "syncTabs",
        "syncCookies", "syncIndexedDb", "syncBookmarks", "syncAuthorization",
        "syncHistory", "syncGoogleAccount", "allowedSignin", "syncSessions", "workbench",
        "clearCacheFilesBeforeLaunch", "clearCookiesBeforeLaunch",
        "clearHistoriesBeforeLaunch", "randomFingerprint", "muteAudio", "disableGpu",
        "abortImageMaxSize", "syncExtensions", "syncUserExtensions", "syncLocalStorage",
        "credentialsEnableService", "disableTranslatePopup", "stopWhileIpChange",
        "disableClipboard", "disableNotifications", "memorySaver", "browserFingerPrint",
        "createdName", "belongUserName", "updateName", "agentIpCount", "belongToMe",
        "seqExport", "groupIDs", "browserShareID", "share", "shareUserName", "isShare",
        "isValidUsername", "createNum", "isRandomFinger", "remarkType", "refreshProxyUrl",
        "duplicateCheck", "ossExtend", "randomKey", "randomKeyUser", "syncBrowserAccount",
        "cookieBak", "passwordBak", "manual", "proxyPasswordBak", "proxyAgreementType",
        "clearCacheWithoutExtensions", "syncPaymentsAndAddress", "extendIds", "isSynOpen",
        "faSecretKey", "coreProduct", "ostype", "os", "sort", "checkPassword",
    }
)  # fmt: skip


async def test_detail_and_list_carry_every_documented_field(account: Account) -> None:
    created = await account.create()
    detail = await account.ok("/browser/detail", {"id": created["id"]})
    (listed,) = (await account.ok("/browser/list", {"page": 0, "pageSize": 10}))["list"]
    for answer in (detail, listed):
        missing = sorted(DOCUMENTED_DETAIL - set(answer))
        assert not missing, missing
    assert detail["lastIp"] == "" and detail["lastCountry"] == ""  # never opened


async def test_a_create_that_leaves_a_field_out_gets_the_documented_default(
    account: Account,
) -> None:
    body = profile_body()
    for left_out in ("ipCheckService", "allowedSignin", "syncTabs", "syncCookies", "isIpv6"):
        body.pop(left_out, None)
    created = await account.ok("/browser/update", body)
    detail = await account.ok("/browser/detail", {"id": created["id"]})
    assert (detail["ipCheckService"], detail["allowedSignin"]) == ("ip-api", True)
    assert (detail["syncTabs"], detail["syncCookies"], detail["isIpv6"]) == (True, True, False)
    assert (detail["proxyMethod"], detail["isDelete"]) == (2, 0)


async def test_an_opened_profile_says_its_last_exit_ip_as_the_client_reads_it(
    account: Account,
) -> None:
    created = await account.create()
    await account.ok("/browser/open", {"id": created["id"], "queue": True})
    detail = await account.ok("/browser/detail", {"id": created["id"]})
    assert detail["lastIp"].count(".") == 3 and detail["lastCountry"]
    assert BrowserProfile.model_validate(detail).last_ip == detail["lastIp"]
    # The same proxy session, the same exit: opened again, the same address.
    await account.ok("/browser/close", {"id": created["id"]})
    await account.advance(10)
    await account.ok("/browser/open", {"id": created["id"], "queue": True})
    again = await account.ok("/browser/detail", {"id": created["id"]})
    assert again["lastIp"] == detail["lastIp"]
