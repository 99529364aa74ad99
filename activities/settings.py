"""What the worker is configured with, as the activities hold it: accounts, proxy pools, intervals.

`AccountSettings` and `ProxyPoolSettings` hold secrets and live in the worker
process only: they are never serialized into a workflow or activity payload.
`PoolSettings` (the intervals) and `LedgerConfig` (an account's creation
window) carry none, and travel to the workflows. Built once by
``worker/config.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from devicepool.api.base import CamelModel
from devicepool.api.v1beta1 import SpendCapSpec

__all__ = [
    "AccountSettings",
    "Billing",
    "LedgerConfig",
    "PoolSettings",
    "ProxyPoolSettings",
]


# About $0.10 a device-hour at BitCloudPhone (the article); each account may say its own.
DEFAULT_PRICE_PER_HOUR = 0.10


class Billing(CamelModel):
    """How an account's provider bills a device (worker config `billing`), beside its price
    of an hour (`PoolSettings.account_prices`: `pricePerHour`, or the per-minute price times
    60).

    `hourly`: every device the provider has not terminated bills at that price. `perMinute`:
    only a device powered on bills (provisioning, ready, busy, rebooting, terminating: not
    offline, which on GeeLark is a phone shut down, nor failed), and at most `daily_cap`
    dollars a device and UTC day (None: no cap). No monthly rental: each phone a pool
    replaces would rent a month no price an hour counts (docs/providers.md, "What GeeLark
    bills")."""

    model: Literal["hourly", "perMinute"] = "hourly"
    daily_cap: float | None = Field(default=None, ge=0)


class AccountSettings(BaseModel):
    """One provider account as the worker knows it. Holds the secret; never serialized."""

    model_config = ConfigDict(extra="forbid")

    name: str
    # Which provider adapter speaks to it (`activities.providers.PROVIDER_APIS`).
    api: str = "rest"
    # Served by a node worker (worker config `node`; `api: bitbrowser` or `geelark`):
    # the node of that name speaks to the provider, this process never does (no URL,
    # no key here). "": this process speaks to `base_url` itself.
    node: str = ""
    # `api: geelark` with `node:` read by that node worker: this process is the account's
    # only one, so its lock grants every warm-reserve claim (the adapter keeps a reserve).
    node_served: bool = False
    base_url: str = ""
    api_key: SecretStr = SecretStr("")
    # `api: geelark` in key mode: the app id the key signs for ("": token mode, `api_key`
    # is the client app's token).
    app_id: str = ""
    creates_per_minute: int = Field(default=20, ge=1)
    timeout_seconds: float = Field(default=10.0, gt=0)
    # The provider's rate window (60 s; shorter only against a sped-up emulator)
    # and the safety margin the permit ledger adds to it.
    window_seconds: float = Field(default=60.0, gt=0)
    window_margin_seconds: float = Field(default=1.0, ge=0)
    # `api: bitbrowser`: seconds from one cloud-phone call's answer to the next call
    # (the Local API allows 1 a second; shorter only against a sped-up emulator).
    phone_interval_seconds: float = Field(default=1.05, gt=0)
    # Dollars a device-hour (worker config `pricePerHour`).
    price_per_hour: float = Field(default=DEFAULT_PRICE_PER_HOUR, ge=0)
    # The account's `spendCap` (worker config): every pool of the account together
    # (None: no account cap). Its ledger holds the creates that would cross it.
    spend_cap: SpendCapSpec | None = None
    # How the provider bills a device (worker config `billing`; `price_per_hour` is then its
    # price of an hour running).
    billing: Billing = Field(default_factory=Billing)


class ProxyPoolSettings(BaseModel):
    """A proxy gateway. `username_template` may use `{session}` and `{ttl}`."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str = "socks5"
    host: str
    port: int = Field(ge=1, le=65535)
    username_template: str = "user-session-{session}-ttl-{ttl}"
    password: SecretStr = SecretStr("")


class PoolSettings(CamelModel):
    """Intervals from the worker's configuration: a pool run asks for them (`pool_settings`,
    or a test passes them in its input) and carries them in its state."""

    resync_seconds: float = Field(default=30.0, gt=0)
    health_seconds: float = Field(default=60.0, gt=0)
    offline_after_seconds: float = Field(default=180.0, gt=0)
    startup_timeout_seconds: float = Field(default=300.0, gt=0)
    idle_grace_seconds: float = Field(default=60.0, ge=0)
    provision_batch_size: int = Field(default=20, ge=1, le=100)
    # A batch quiet for twice the startup timeout and this long is asked after
    # (does it still run?). Shorter only in tests.
    batch_check_grace_seconds: float = Field(default=60.0, gt=0)
    # Longest a quiet pool goes without a workflow task (the watch activity's cap).
    watch_max_seconds: float = Field(default=3600.0, gt=0)
    # How often the pool's watch asks Temporal whether the pool's health check
    # still runs (a check that ended is started again): in the worker, no history.
    health_liveness_seconds: float = Field(default=300.0, gt=0)
    # Failing replacements: after this many devices in a row never reach ready,
    # the pool stops creating in the region and backs off (capped).
    failure_streak_limit: int = Field(default=3, ge=1)
    backoff_initial_seconds: float = Field(default=30.0, gt=0)
    backoff_max_seconds: float = Field(default=900.0, gt=0)
    # A deleted pool whose teardown keeps failing (any error, retryable too)
    # shows `TeardownBlocked=True` within this many seconds; it keeps trying.
    teardown_blocked_after_seconds: float = Field(default=60.0, gt=0)
    # A node worker silent this long (no beat at the node registry) is lost: a
    # BrowserPool counts its profiles lost and holds their slots elsewhere.
    node_lost_after_seconds: float = Field(default=120.0, gt=0)
    # Each account's price of a device-hour (worker config `pricePerHour`); an
    # account not listed costs `DEFAULT_PRICE_PER_HOUR`.
    account_prices: dict[str, float] = Field(default_factory=dict)
    # Each account's billing model (worker config `billing`); an account not listed bills
    # by the hour.
    account_billing: dict[str, Billing] = Field(default_factory=dict)
    # Accounts served by a node worker (worker config `accounts.<name>.node`): their
    # provider calls are scheduled on that node's queue. An account not listed is
    # served by the workers of the pool's own queues.
    account_nodes: dict[str, str] = Field(default_factory=dict)
    # Accounts of BitBrowser Local API cloud phones (`api: bitbrowser`): a removal shuts a
    # phone down, a create powers one on, and the pools' events say so.
    phone_accounts: list[str] = Field(default_factory=list)
    # Whether the worker encrypts the payloads it writes (`encryption.keyFiles`): only then
    # does the `lease_connect` update answer connect info (docs/leases.md, "Connect info").
    history_encrypted: bool = False

    def price_per_hour(self, account: str) -> float:
        """What one device of `account` costs an hour, in dollars."""
        return self.account_prices.get(account, DEFAULT_PRICE_PER_HOUR)

    def billing_of(self, account: str) -> Billing:
        """How `account`'s provider bills a device (by the hour unless the config says)."""
        return self.account_billing.get(account) or Billing()

    def node_of(self, account: str) -> str:
        """The node worker that serves `account`'s provider calls ("" for none)."""
        return self.account_nodes.get(account, "")


class LedgerConfig(CamelModel):
    """One account's creation window: `capacity` creates per `window_seconds`."""

    capacity: int = Field(default=20, ge=1)
    window_seconds: float = Field(default=60.0, gt=0)
    # Added to every window (clock skew between the provider and Temporal); also
    # how long the first request after an idle spell waits for others to share.
    margin_seconds: float = Field(default=1.0, ge=0)
    # The account's spendCap as devices billing at once, over every pool of the
    # account (None: no cap): a permit that would take the account past it waits.
    max_devices: int | None = Field(default=None, ge=0)
    # The cap as the worker config says it, for the held pools' `SpendCapReached`.
    cap_text: str = ""
    # The node worker serving the account ("" for none): where the cap's count runs.
    node: str = ""

    @classmethod
    def of(cls, account: AccountSettings) -> LedgerConfig:
        cap = account.spend_cap
        return cls(
            capacity=account.creates_per_minute,
            window_seconds=account.window_seconds,
            margin_seconds=account.window_margin_seconds,
            max_devices=cap.devices_allowed(account.price_per_hour) if cap else None,
            cap_text=cap.describe(account.price_per_hour) if cap else "",
            node=account.node,
        )
