"""Configuration of the BitBrowser Local API emulator, built once by the CLI (or a test)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from devicepool.emulator._base import check_fields

DEFAULT_PORT = 54345
DEFAULT_ACCOUNT = "default"

PHONE_RATE_MODES = ("refuse", "http429", "delay")
PHONE_RATE_SCOPES = ("account", "node")
AUTH_REFUSAL_STATUSES = (403, 200)


# Where the CLI keeps accounts that separate emulator processes share (`--accounts-dir`).
ACCOUNTS_DIR_ENV = "DEVICEPOOL_BITBROWSER_ACCOUNTS_DIR"


def default_accounts_dir() -> Path:
    """$DEVICEPOOL_BITBROWSER_ACCOUNTS_DIR, else a directory of this user's under the temp dir:
    every emulator process of one account on this machine finds the account there."""
    given = os.environ.get(ACCOUNTS_DIR_ENV)
    if given:
        return Path(given)
    return Path(tempfile.gettempdir()) / f"devicepool-bitbrowser-{os.getuid()}"


_DURATIONS = (
    "open_seconds",
    "close_linger_seconds",
    "phone_boot_seconds",
    "phone_resume_seconds",
    "phone_restart_seconds",
    "phone_shutdown_seconds",
)


def _default_nodes() -> list[str]:
    return ["node-1"]


@dataclass
class BitBrowserConfig:
    """Everything the emulator needs to start.

    One emulator serves one BitBrowser *account* and the desktop clients
    (`nodes`) logged into it: every node lists the same profiles and phones.
    Durations are in virtual seconds (the clock runs `speed` times faster).
    `api_key`: None leaves API auth off; a key switches it on for every node.
    """

    account: str = DEFAULT_ACCOUNT
    nodes: list[str] = field(default_factory=_default_nodes)
    api_key: str | None = None
    # The vendor reports a refused key as a 403 (DESIGN.md); 200 answers it in the envelope.
    auth_refusal_status: int = 403
    open_seconds: float = 1.0
    close_linger_seconds: float = 3.0
    phone_boot_seconds: float = 60.0
    phone_resume_seconds: float = 5.0
    phone_restart_seconds: float = 30.0
    # How long an accepted `/phone/shutdown` takes to power the phone off (0: at once).
    phone_shutdown_seconds: float = 0.0
    phone_requests_per_second: int = 1
    phone_rate_mode: str = "refuse"
    phone_rate_scope: str = "account"
    phone_recovers_per_month: int = 60
    # None: any non-empty regionId is a compute type; a list: only these.
    phone_regions: list[str] | None = None
    speed: float = 1.0
    seed: int | None = None
    # Keep the account in this JSON file, so an emulator started again on it is the same
    # account (None: in memory only).
    state_file: Path | None = None
    # Without a state file: keep the account in `<accounts_dir>/<account>.json` while any
    # process of it runs, so that separate emulator processes of one account share it
    # (None: this process's memory only).
    accounts_dir: Path | None = None

    def __post_init__(self) -> None:
        if not self.account:
            raise ValueError("the account name must not be empty")
        if not self.nodes:
            raise ValueError("at least one node is required")
        if len(set(self.nodes)) != len(self.nodes) or not all(self.nodes):
            raise ValueError(f"node names must be distinct and non-empty: {self.nodes}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("the API key must not be empty (None switches auth off)")
        if self.auth_refusal_status not in AUTH_REFUSAL_STATUSES:
            raise ValueError(f"auth_refusal_status must be one of {AUTH_REFUSAL_STATUSES}")
        check_fields(self, _DURATIONS, least=0)
        check_fields(self, ("phone_requests_per_second",), least=1)
        if self.phone_rate_mode not in PHONE_RATE_MODES:
            raise ValueError(f"phone_rate_mode must be one of {PHONE_RATE_MODES}")
        if self.phone_rate_scope not in PHONE_RATE_SCOPES:
            raise ValueError(f"phone_rate_scope must be one of {PHONE_RATE_SCOPES}")
        if self.phone_recovers_per_month < 0:
            raise ValueError("phone_recovers_per_month must be >= 0")
        if self.phone_regions is not None and not all(self.phone_regions):
            raise ValueError("phone region ids must be non-empty")
        if not self.speed > 0:
            raise ValueError("speed must be > 0")
