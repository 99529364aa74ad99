"""The GeeLark Open API adapter (`api: geelark`): cloud phones behind the provider seam.

    api = GeeLarkApi(app_id=APP_ID, api_key=key)     # one per key: signs, paces, breaks
    provider = GeeLarkProvider(api)                   # a `providers.Provider`

Failures are the `ProviderError` tree of `activities.errors`, typed by the vendor's codes
(`errors`). What it assumes where the vendor is silent: docs/providers.md, "GeeLark's Open
API".
"""

from devicepool.activities.providers.geelark.api import DEFAULT_BASE_URL, MAX_IDS, Batch, GeeLarkApi
from devicepool.activities.providers.geelark.errors import (
    GeeLarkAuthError,
    GeeLarkBusyError,
    GeeLarkCapacityError,
    GeeLarkError,
    GeeLarkInvalidError,
    GeeLarkLockedError,
    GeeLarkNotFoundError,
    GeeLarkQuotaError,
    GeeLarkRateLimitedError,
    GeeLarkServerError,
    GeeLarkStateError,
    GeeLarkUnavailableError,
    next_utc_midnight,
)
from devicepool.activities.providers.geelark.limits import Breaker, EndpointPacer
from devicepool.activities.providers.geelark.provider import GeeLarkProvider
from devicepool.activities.providers.geelark.signing import KeyAuth, TokenAuth, sign

__all__ = [
    "DEFAULT_BASE_URL",
    "MAX_IDS",
    "Batch",
    "Breaker",
    "EndpointPacer",
    "GeeLarkApi",
    "GeeLarkAuthError",
    "GeeLarkBusyError",
    "GeeLarkCapacityError",
    "GeeLarkError",
    "GeeLarkInvalidError",
    "GeeLarkLockedError",
    "GeeLarkNotFoundError",
    "GeeLarkProvider",
    "GeeLarkQuotaError",
    "GeeLarkRateLimitedError",
    "GeeLarkServerError",
    "GeeLarkStateError",
    "GeeLarkUnavailableError",
    "KeyAuth",
    "TokenAuth",
    "next_utc_midnight",
    "sign",
]
