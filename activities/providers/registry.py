"""One adapter per account, chosen by the account's `api` (the worker config's `accounts.<name>.api`).

A second transport is one more entry in `ADAPTERS` (and its name in
`base.PROVIDER_APIS`, which the config checks without loading any adapter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.metrics import Metrics
from devicepool.activities.providers.base import Provider
from devicepool.activities.providers.bitbrowser import (
    CloudPhones,
    LocalApi,
    PhonePacer,
    PhoneProvider,
)
from devicepool.activities.providers.geelark import (
    Breaker,
    EndpointPacer,
    GeeLarkApi,
    GeeLarkProvider,
)
from devicepool.activities.providers.rest import RestProvider
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import AccountSettings

# `PhonePacer` too: the seam hands a shared one in without loading the adapter itself.
__all__ = ["ADAPTERS", "PhonePacer", "Transport", "build_provider"]

# What tests hand an adapter instead of the network (an in-process emulator).
Transport = httpx.AsyncBaseTransport


def _rest(account: AccountSettings, http: dict[str, Any], pacer: PhonePacer | None) -> Provider:
    return RestProvider(BitCloudPhoneClient(**http))


def _bitbrowser(
    account: AccountSettings, http: dict[str, Any], pacer: PhonePacer | None
) -> Provider:
    # One pacer per account (or the one handed in, a node worker's for every account
    # it serves): every pool's calls share the 1-a-second budget.
    pacer = pacer or PhonePacer(interval=account.phone_interval_seconds)
    return PhoneProvider(CloudPhones(LocalApi(**http), pacer=pacer))


def _geelark(account: AccountSettings, http: dict[str, Any], pacer: PhonePacer | None) -> Provider:
    # One pacer and one breaker per key in this process: GeeLark's windows (200/min and
    # 24,000/h per endpoint) and its two-hour lock are the key's. `window_seconds` is the
    # minute (shorter only against a sped-up emulator); the lock is 120 of them.
    minute = account.window_seconds
    api = GeeLarkApi(
        **http,
        app_id=account.app_id,
        pacer=EndpointPacer(minute=minute, margin=account.window_margin_seconds),
        breaker=Breaker(lock_seconds=120 * minute),
    )
    # The warm reserve only on the account's node worker: one process grants every claim.
    return GeeLarkProvider(api, reserve=account.node_served)


# An adapter is built from its account, what its HTTP client is built with, and the
# cloud-phone budget to share (`build_provider`).
ADAPTERS: dict[str, Callable[[AccountSettings, dict[str, Any], PhonePacer | None], Provider]] = {
    "rest": _rest,
    "bitbrowser": _bitbrowser,
    "geelark": _geelark,
}


def build_provider(
    account: AccountSettings,
    *,
    transport: Transport | None = None,
    metrics: Metrics,
    scrubber: Scrubber,
    phone_pacer: PhonePacer | None = None,
) -> Provider:
    """The adapter for `account` (a `ValueError` for an `api` no adapter speaks).

    `phone_pacer`: the cloud-phone budget to share (`api: bitbrowser`); None: its own.
    """
    build = ADAPTERS.get(account.api)
    if build is None:
        known = ", ".join(sorted(ADAPTERS))
        raise ValueError(f"account {account.name!r}: unknown api {account.api!r} (known: {known})")
    if account.node:
        raise ValueError(
            f"account {account.name!r}: served by node worker {account.node!r}, not here"
        )
    http = {
        "base_url": account.base_url,
        "api_key": account.api_key,
        "timeout": account.timeout_seconds,
        "transport": transport,
        "metrics": metrics,
        "scrubber": scrubber,
    }
    return build(account, http, phone_pacer)
