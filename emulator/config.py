"""Configuration of the BitCloudPhone emulator, built once by the CLI (or a test) and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ACCOUNT = "default"
DEFAULT_API_KEY = "devicepool-dev-key"


def _default_accounts() -> dict[str, list[str]]:
    return {DEFAULT_ACCOUNT: [DEFAULT_API_KEY]}


@dataclass
class EmulatorConfig:
    """Everything the emulator needs to start.

    Durations are in *virtual* seconds: the emulator's clock runs `speed` times
    faster than real time, and the rate-limit window (60 s) is virtual too.
    `state_file`: keep the provider's state in this SQLite file, so that an
    emulator started again on it is the same provider (None: in memory only).
    """

    accounts: dict[str, list[str]] = field(default_factory=_default_accounts)
    provision_seconds: float = 45
    creates_per_minute: int = 20
    speed: float = 1
    seed: int | None = None
    terminate_seconds: float = 5
    max_devices_per_account: int | None = None
    state_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.accounts:
            raise ValueError("at least one account is required")
        owner: dict[str, str] = {}
        for name, keys in self.accounts.items():
            if not name:
                raise ValueError("account names must not be empty")
            if not keys:
                raise ValueError(f"account {name!r} has no API key")
            for key in keys:
                if not key:
                    raise ValueError(f"account {name!r} has an empty API key")
                if owner.setdefault(key, name) != name:
                    # Each key belongs to exactly one account: the rate limit is per account.
                    raise ValueError(f"API key {key!r} is given to two accounts")
        if self.provision_seconds < 0:
            raise ValueError("provision_seconds must be >= 0")
        if self.terminate_seconds < 0:
            raise ValueError("terminate_seconds must be >= 0")
        if self.creates_per_minute < 1:
            raise ValueError("creates_per_minute must be >= 1")
        if not self.speed > 0:
            raise ValueError("speed must be > 0")
        if self.max_devices_per_account is not None and self.max_devices_per_account < 0:
            raise ValueError("max_devices_per_account must be >= 0")
