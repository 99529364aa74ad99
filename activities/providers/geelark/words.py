"""A GeeLark phone in devicepool's words, and devicepool's words for a create: a listed
status as a device status (`phone_status`; a phone an earlier build parked: `parked_status`),
`addNew`'s `mobileType` from a pool's `osVersion`, a proxy as `proxyInformation`. Pure; the
adapter (`provider`) uses them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from devicepool.activities.device_models import (
    FAILED,
    OFFLINE,
    PROVISIONING,
    READY,
    UNKNOWN_STATUS_REASON,
)
from devicepool.activities.providers.geelark.marks import RESERVE_DIGEST
from devicepool.activities.providers.geelark.phones import (
    EXPIRED,
    SHUT_DOWN,
    STARTED,
    STARTING,
    as_int,
)
from devicepool.activities.proxy import ResolvedProxy

__all__ = [
    "DEFAULT_MOBILE_TYPE",
    "PARKED",
    "mobile_type",
    "parked_status",
    "phone_status",
    "proxy_information",
]

# `addNew` requires `mobileType`; a pool without `osVersion` gets the newest Android the
# vendor lists, the one every region offers (`us` offers no other).
DEFAULT_MOBILE_TYPE = "Android 15"
_STATUSES = {STARTED: READY, STARTING: PROVISIONING, SHUT_DOWN: OFFLINE, EXPIRED: FAILED}
_REASONS = {SHUT_DOWN: "shut down at the provider", EXPIRED: "expired at the provider"}
PARKED = (
    "parked in a warm reserve (by a node worker or an earlier devicepool build) but started,"
    " or with no template hash, or on an account without a node; never serves"
)


def parked_status(digest: str, status: str, reason: str | None) -> tuple[str, str | None]:
    """A phone parked in a reserve that is listed as a device is `failed` (it serves no slot,
    ever): its pool removes it at once and counts it toward nothing; any other keeps its
    status."""
    return (FAILED, PARKED) if digest == RESERVE_DIGEST else (status, reason)


def phone_status(value: Any) -> tuple[str, str | None]:
    """A listed status (0 started, 1 starting, 2 shut down, 3 expired) as devicepool's, and
    why (None: nothing to say)."""
    code = as_int(value)
    if code in _STATUSES:
        return _STATUSES[code], _REASONS.get(code)
    # Offline to the health check, running to per-minute billing (`running_devices`).
    return OFFLINE, f"{UNKNOWN_STATUS_REASON}: {str(value)[:20]!r}"


def mobile_type(os_version: str) -> str:
    """`addNew`'s `mobileType` ("Android 9".."Android 15") from the pool's `osVersion`."""
    text = os_version.strip()
    if text.lower().startswith("android"):
        text = text[len("android") :].strip()
    return f"Android {text}"


def proxy_information(proxy: ResolvedProxy) -> str:
    """`type://user:password@host:port`, user and password URL-encoded."""
    secret = quote(proxy.password.get_secret_value(), safe="")
    return f"{proxy.type}://{quote(proxy.username, safe='')}:{secret}@{proxy.host}:{proxy.port}"
