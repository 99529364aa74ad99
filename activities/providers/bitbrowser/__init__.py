"""The BitBrowser Local API client: one node's desktop client, both families.

    api = LocalApi(base_url="http://127.0.0.1:54345", api_key=key)   # one per node
    profiles = BrowserProfiles(api)                                  # /browser/*
    phones = CloudPhones(api, pacer=account_pacer)                   # /phone/*, 1 call a second

Failures are the `ProviderError` tree of `activities.errors`; refusals are its
`LocalApi*Error` subclasses with the vendor's text in `raw_msg` (`errors`). Returned
models carry no secret (`models`). The adapters on it: `PhoneProvider` (DevicePool,
`api: bitbrowser`) and `BitBrowserProfiles` (BrowserPool). What it assumes where the
vendor is silent: docs/providers.md.
"""

from devicepool.activities.providers.bitbrowser.browsers import (
    MAX_BROWSER_MARK,
    MAX_IDS_PER_CALL,
    BrowserProfiles,
)
from devicepool.activities.providers.bitbrowser.errors import (
    CloseUnconfirmedError,
    LocalApiAuthError,
    LocalApiBusyError,
    LocalApiError,
    LocalApiInvalidError,
    LocalApiNotFoundError,
    LocalApiQuotaError,
    LocalApiRateLimitedError,
    LocalApiRefusedError,
    LocalApiStateError,
    LocalApiUnavailableError,
    LocalApiUnsupportedError,
    Refusal,
    classify,
)
from devicepool.activities.providers.bitbrowser.local_api import DEFAULT_BASE_URL, LocalApi
from devicepool.activities.providers.bitbrowser.models import (
    MAX_PAGE_SIZE,
    AdbEndpoint,
    BrowserPage,
    BrowserProfile,
    ComputeType,
    MarkedCreate,
    OpenedBrowser,
    Phone,
    PhonePage,
    PhoneProxy,
    PhoneStatus,
    ProfileProxy,
)
from devicepool.activities.providers.bitbrowser.pacer import DEFAULT_PHONE_INTERVAL, PhonePacer
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.activities.providers.bitbrowser.phones import MAX_PHONE_MARK, CloudPhones

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_PHONE_INTERVAL",
    "MAX_BROWSER_MARK",
    "MAX_IDS_PER_CALL",
    "MAX_PAGE_SIZE",
    "MAX_PHONE_MARK",
    "AdbEndpoint",
    "BrowserPage",
    "BrowserProfile",
    "BrowserProfiles",
    "CloseUnconfirmedError",
    "CloudPhones",
    "ComputeType",
    "LocalApi",
    "LocalApiAuthError",
    "LocalApiBusyError",
    "LocalApiError",
    "LocalApiInvalidError",
    "LocalApiNotFoundError",
    "LocalApiQuotaError",
    "LocalApiRateLimitedError",
    "LocalApiRefusedError",
    "LocalApiStateError",
    "LocalApiUnavailableError",
    "LocalApiUnsupportedError",
    "MarkedCreate",
    "OpenedBrowser",
    "Phone",
    "PhonePacer",
    "PhonePage",
    "PhoneProvider",
    "PhoneProxy",
    "PhoneStatus",
    "ProfileProxy",
    "Refusal",
    "classify",
]
