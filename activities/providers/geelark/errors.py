"""What a refused GeeLark call raises: the house's `ProviderError` tree, by the vendor's code.

GeeLark answers HTTP 200 `{traceId, code, msg, data}`; `code` 0 is success. Every other
code raises a subclass of the shared tree (`activities.errors`), so the engine's retry
rules hold unchanged; each keeps the vendor's `code` and its `msg` (scrubbed)::

    codes                                   raises                    ErrorType          retried
    40003 40013 40015 40016                 GeeLarkAuthError          UNAUTHENTICATED    no
    40001 40002 40004 40008 40012 ...       GeeLarkInvalidError       INVALID_ARGUMENT   no
      (43020 43022 a tag refused)
    40005 42001 47004                       GeeLarkNotFoundError      NOT_FOUND          no
    43005 43006 43007 43009 43010 43021     GeeLarkBusyError          INVALID_STATE      no
      43036 40010                             (the device is busy: the caller decides)
    42002 43004 47003 49001 49002 50001     GeeLarkStateError         INVALID_STATE      no
    43008 44004                             GeeLarkQuotaError         QUOTA_EXCEEDED     no
                                              (`resets_at`: the next UTC midnight)
    40011 41001 44001 44002 44003 46001..3  GeeLarkQuotaError         QUOTA_EXCEEDED     no
                                              (`resets_at` None: a plan or balance matter)
    40007 40017                             GeeLarkRateLimitedError   RATE_LIMITED       yes, next minute
    47001 47002                             GeeLarkCapacityError      RATE_LIMITED       yes, a minute on
    40014                                   GeeLarkLockedError        RATE_LIMITED       not for 2 h
                                              (`reopens_at`; the key's breaker is open)
    43029 44006                             GeeLarkUnavailableError   REGION_UNAVAILABLE yes (pool backs off)
    40000 45002 45004 50000, any other      GeeLarkServerError        SERVER_ERROR       yes
    43020 on phone/start                    GeeLarkServerError        SERVER_ERROR       yes
      ("currently unavailable, try again later": the vendor reuses 43020..43024 by endpoint)

Why 47002 is a capacity back-off and not a two-hour lock (the vendor's pages disagree),
and why an unknown code is retried: docs/providers.md, "GeeLark's Open API".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devicepool.activities.errors import (
    InvalidArgumentError,
    InvalidStateError,
    NotFoundError,
    ProviderError,
    QuotaExceededError,
    RateLimitedError,
    RegionUnavailableError,
    ServerError,
    UnauthenticatedError,
)
from devicepool.api.errors import ErrorType

__all__ = [
    "BUSY_CODES",
    "LOCKED",
    "NOT_FOUND_CODES",
    "GeeLarkAuthError",
    "GeeLarkBusyError",
    "GeeLarkCapacityError",
    "GeeLarkError",
    "GeeLarkInvalidError",
    "GeeLarkLockedError",
    "GeeLarkNotFoundError",
    "GeeLarkQuotaError",
    "GeeLarkRateLimitedError",
    "GeeLarkServerError",
    "GeeLarkStateError",
    "GeeLarkTimeSpentError",
    "GeeLarkUnavailableError",
    "error_for",
    "locked_error",
    "next_utc_midnight",
]

LOCKED = 40014
PARTIAL = frozenset({40006, 40009})  # a batch's envelope: the per-item lists decide
NOT_FOUND_CODES = frozenset({40005, 42001, 47004})
BUSY_CODES = frozenset({40010, 43005, 43006, 43007, 43009, 43010, 43021, 43036})
DAILY_QUOTA_CODES = {43008: "daily open quota", 44004: "daily create quota"}
# What a pool's `QuotaExhausted` condition names as its reason (the rest: `QuotaExceeded`).
QUOTA_NAMES = {
    43008: "DailyOpenQuota",
    44004: "DailyCreateQuota",
    44002: "ProfileCap",
    44003: "ProfileCap",
    46002: "ProfileCap",
    46003: "ProfileCap",
    41001: "BalanceExhausted",
}
_AUTH = frozenset({40003, 40013, 40015, 40016})
_INVALID = frozenset({40001, 40002, 40004, 40008, 40012, 43020, 43022})
_STATE = frozenset({42002, 43004, 47003, 49001, 49002, 50001})
_QUOTA = frozenset({40011, 41001, 44001, 44002, 44003, 46001, 46002, 46003})
_RATE = frozenset({40007, 40017})
_CAPACITY = frozenset({47001, 47002})
_UNAVAILABLE = frozenset({43029, 44006})
# Codes the vendor gives another meaning on one endpoint (call -> codes read as a server
# error there, retried): 43020 on the start page is "currently unavailable, try again later".
_TRANSIENT_ON = {"POST /open/v1/phone/start": frozenset({43020})}
# 47001/47002 name no wait: a minute, then the retry policy's own back-off on top.
CAPACITY_RETRY_AFTER = 60.0


class GeeLarkError(ProviderError):
    """A GeeLark call refused: the vendor's `code` and `msg` (scrubbed) kept."""

    code: int = 0
    raw_msg: str = ""


class GeeLarkAuthError(GeeLarkError, UnauthenticatedError):
    """The signature, key, token, user or IP was refused."""


class GeeLarkInvalidError(GeeLarkError, InvalidArgumentError):
    """The body was refused (or devicepool sent a call the vendor does not take)."""


class GeeLarkNotFoundError(GeeLarkError, NotFoundError):
    """No such phone (deleted, or never made)."""


class GeeLarkBusyError(GeeLarkError, InvalidStateError):
    """The phone is in use at the provider: an RPA task runs (43005), someone is connected
    (43006), it is started or starting (no delete). Not retried blindly: the caller decides."""


class GeeLarkStateError(GeeLarkError, InvalidStateError):
    """The call does not fit the phone (not running, expired, no ADB on its model)."""


class GeeLarkQuotaError(GeeLarkError, QuotaExceededError):
    """A quota is used up. `resets_at`: when (a daily quota: the next UTC midnight); None for
    a plan's profile cap or the balance, which no clock resets. `quota`: which (`QUOTA_NAMES`)."""


class GeeLarkRateLimitedError(GeeLarkError, RateLimitedError):
    """Past a request window (`retry_after`: until the next minute)."""


class GeeLarkCapacityError(GeeLarkRateLimitedError):
    """Too many concurrent requests or devices (47001/47002): back off."""


class GeeLarkLockedError(GeeLarkRateLimitedError):
    """The key is locked for two hours (40014), or this worker's breaker holds every call
    of the key until `reopens_at` so that no retry makes the lock longer."""

    reopens_at: datetime


class GeeLarkUnavailableError(GeeLarkError, RegionUnavailableError):
    """No phone to be had now (inventory, a model under maintenance): the pool backs off."""


class GeeLarkTimeSpentError(GeeLarkError):
    """A call not sent: the attempt that asked it has no time left for it (`TIMEOUT`,
    retried). Not a `TransportError`: nothing was sent, so nothing needs looking up."""


class GeeLarkServerError(GeeLarkError, ServerError):
    """The vendor failed (40000, 50000), a proxy failed, or a code this adapter does not know."""


def next_utc_midnight(now: datetime) -> datetime:
    """When a quota counted per UTC day resets."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


def _until_next_minute(now: datetime) -> float:
    return max(1.0, 60.0 - now.second - now.microsecond / 1e6)


def _kept(error: GeeLarkError, code: int, msg: str) -> GeeLarkError:
    error.code, error.raw_msg = code, msg
    return error


def _detail(call: str, code: int, msg: str) -> str:
    shown = " ".join(msg.split())[:300] or "(no msg)"
    return f"{call} refused: {code} {shown}"


def locked_error(
    call: str, reopens_at: datetime, *, now: datetime, code: int = LOCKED, msg: str = ""
) -> GeeLarkError:
    """The error of a call the key's breaker holds (or the 40014 that opened it)."""
    when = reopens_at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    detail = (
        f"{call}: the GeeLark key is locked for exceeding the hourly request limit (40014);"
        f" no call of this key is made until {when}"
    )
    wait = max(0.0, (reopens_at - now).total_seconds())
    error = GeeLarkLockedError(ErrorType.RATE_LIMITED, 200, detail, wait)
    error.reopens_at = reopens_at
    return _kept(error, code, msg)


def error_for(call: str, code: int, msg: str, *, now: datetime) -> GeeLarkError:
    """The typed error for `code` answered to `call` (`msg` already scrubbed).

    40014 is `locked_error`'s: the caller trips its breaker first."""
    detail = _detail(call, code, msg)
    if code == LOCKED:
        return locked_error(call, now + timedelta(hours=2), now=now, msg=msg)
    if code in DAILY_QUOTA_CODES:
        resets = next_utc_midnight(now)
        when = resets.isoformat(timespec="seconds").replace("+00:00", "Z")
        quota = GeeLarkQuotaError(
            ErrorType.QUOTA_EXCEEDED,
            200,
            f"{detail} ({DAILY_QUOTA_CODES[code]} used up; resets at {when})",
        )
        quota.resets_at, quota.quota = resets, QUOTA_NAMES[code]
        return _kept(quota, code, msg)
    error: GeeLarkError
    if code in _TRANSIENT_ON.get(call, ()):
        error = GeeLarkServerError(ErrorType.SERVER_ERROR, 200, detail)
    elif code in _AUTH:
        error = GeeLarkAuthError(ErrorType.UNAUTHENTICATED, 200, detail)
    elif code in _INVALID:
        error = GeeLarkInvalidError(ErrorType.INVALID_ARGUMENT, 200, detail)
    elif code in NOT_FOUND_CODES:
        error = GeeLarkNotFoundError(ErrorType.NOT_FOUND, 200, detail)
    elif code in BUSY_CODES:
        error = GeeLarkBusyError(ErrorType.INVALID_STATE, 200, detail)
    elif code in _STATE:
        error = GeeLarkStateError(ErrorType.INVALID_STATE, 200, detail)
    elif code in _QUOTA:
        error = GeeLarkQuotaError(ErrorType.QUOTA_EXCEEDED, 200, detail)
        error.quota = QUOTA_NAMES.get(code)
    elif code in _RATE:
        error = GeeLarkRateLimitedError(
            ErrorType.RATE_LIMITED, 200, detail, _until_next_minute(now)
        )
    elif code in _CAPACITY:
        error = GeeLarkCapacityError(ErrorType.RATE_LIMITED, 200, detail, CAPACITY_RETRY_AFTER)
    elif code in _UNAVAILABLE:
        error = GeeLarkUnavailableError(ErrorType.REGION_UNAVAILABLE, 200, detail)
    else:
        error = GeeLarkServerError(ErrorType.SERVER_ERROR, 200, detail)
    return _kept(error, code, msg)
