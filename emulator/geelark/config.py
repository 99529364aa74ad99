"""Configuration of the GeeLark Open API emulator, built once by the CLI (or a test).

Figures the vendor publishes are the defaults (their source is named beside each); where the
docs are silent the default is ours, and says so. Durations are virtual seconds (the clock
runs `speed` times faster); days are UTC days of the virtual clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from devicepool.emulator._base import check_fields

DEFAULT_PORT = 8090
# The doc's worked example of key auth: a client signing with these passes the doc's vector.
DEFAULT_APP_ID = "eH6gQR4oHr3FsZpI36La01IW"
DEFAULT_API_KEY = "YjmFIUuq0oJgSDJ42fxLEb6R1qjjqf"
DEFAULT_TOKEN = "geelark-dev-token"

_COUNTS = (
    "max_concurrent_requests",
    "max_running",
    "creates_per_day",
    "opens_per_day",
    "max_profiles",
)
_AMOUNTS = (
    "lock_seconds",
    "balance",
    "price_per_minute",
    "daily_cap",
    "monthly_price",
    "boot_seconds",
    "adb_ready_seconds",
)

BATCH_ENVELOPES = ("zero", "coded")
PLANS = ("base", "pro")


@dataclass
class GeeLarkConfig:
    """Everything the emulator needs to start: one GeeLark team (account) and its plan."""

    # Auth: key mode (appId + apiKey sign every call) and token mode (Bearer) are both on;
    # None switches that mode off.
    app_id: str | None = DEFAULT_APP_ID
    api_key: str | None = DEFAULT_API_KEY
    token: str | None = DEFAULT_TOKEN
    # Limits (documented: "200 requests per minute, 24,000 requests per hour" per API; an
    # hourly overrun locks the key for two hours, 40014).
    requests_per_minute: int = 200
    requests_per_hour: int = 24_000
    lock_seconds: float = 7200.0
    # Our choice (docs silent on a number): calls in flight at once per key; 0 = no limit.
    max_concurrent_requests: int = 0
    # Our choice: phones started or starting at once (47001); 0 = no limit.
    max_running: int = 0
    # Plan quotas: the Pro plan's figures (pay/profiles/list: create 200/day, open 10,000/day);
    # the Pro plan's envNum is 20, our default is 200 so a 100-phone bench fits.
    plan: str = "pro"
    creates_per_day: int = 200
    opens_per_day: int = 10_000
    max_profiles: int = 200
    # Money (vendor pricing: $0.007 per running minute, at most $1.00 per phone per day).
    balance: float = 100.0
    price_per_minute: float = 0.007
    daily_cap: float = 1.0
    # Our choice: a monthly-rental phone (chargeMode 1) is charged this once, when created.
    monthly_price: float = 9.9
    # Lifecycle (our choices where the docs give no figure; "wait ~3 s" for ADB is theirs).
    boot_seconds: float = 20.0
    adb_ready_seconds: float = 3.0
    # Documented: energySavingMode stops a phone after 30 minutes of inactivity.
    idle_minutes: float = 30.0
    # Batch envelopes: "zero" answers code 0 whatever the items did (as observed in the
    # field); "coded" answers 40006 on a partial success and 40009 when every item failed.
    batch_envelope: str = "zero"
    speed: float = 1.0
    seed: int | None = None
    # Keep the team in this JSON file, so an emulator started again on it is the same team
    # (None: in memory only).
    state_file: Path | None = None

    def __post_init__(self) -> None:
        if self.app_id is not None and (not self.app_id or self.api_key is None):
            raise ValueError("key auth needs both an app id and an API key")
        if self.api_key is not None and (not self.api_key or self.app_id is None):
            raise ValueError("key auth needs both an app id and an API key")
        if self.token is not None and not self.token:
            raise ValueError("the token must not be empty (None switches token auth off)")
        if self.app_id is None and self.token is None:
            raise ValueError("switch on at least one auth mode (key or token)")
        check_fields(self, ("requests_per_minute", "requests_per_hour"), least=1)
        check_fields(self, _COUNTS, least=0)
        check_fields(self, _AMOUNTS, least=0, finite=True)
        if not math.isfinite(self.idle_minutes) or self.idle_minutes <= 0:
            raise ValueError("idle_minutes must be a finite number > 0")
        if self.plan not in PLANS:
            raise ValueError(f"plan must be one of {PLANS}")
        if self.batch_envelope not in BATCH_ENVELOPES:
            raise ValueError(f"batch_envelope must be one of {BATCH_ENVELOPES}")
        if not math.isfinite(self.speed) or self.speed <= 0:
            raise ValueError("speed must be > 0")
