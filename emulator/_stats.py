"""Ground-truth stats: the provider's counters and the `GET /_emulator/stats` shape.

Billing counts every device from its creation until it is terminated (or until
now, while it is not), in device-hours of virtual time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator._devices import Device


@dataclass
class Counters:
    accepted: int = 0
    rate_limited: int = 0
    idempotent_replays: int = 0
    rejected: int = 0
    terminations: int = 0
    reboots: int = 0
    faults_injected: Counter[str] = field(default_factory=Counter)
    accepted_by_account: Counter[str] = field(default_factory=Counter)
    rate_limited_by_account: Counter[str] = field(default_factory=Counter)

    def count_rejected_create(self, error_status: int) -> None:
        if error_status == 429:
            self.rate_limited += 1
        else:
            self.rejected += 1


def stats_json(
    *,
    counters: Counters,
    devices: list[Device],
    status_of: Callable[[Device], str],
    accounts: Iterable[str],
    now: float,
) -> dict[str, Any]:
    """The stats of settled `devices`; `status_of` gives the status a client sees."""
    live = [d for d in devices if d.status != "terminated"]
    live_by_account = Counter(d.account for d in live)
    return {
        "devices": {
            "live": len(live),
            "byStatus": dict(sorted(Counter(status_of(d) for d in live).items())),
            "byPool": dict(sorted(Counter(d.labels.get("pool", "") for d in live).items())),
        },
        "creates": {
            "accepted": counters.accepted,
            "rateLimited": counters.rate_limited,
            "idempotentReplays": counters.idempotent_replays,
            "rejected": counters.rejected,
        },
        "terminations": counters.terminations,
        "deviceHoursBilled": round(_billed_seconds(devices, now) / 3600, 4),
        "extra": {
            "reboots": counters.reboots,
            "accounts": {
                name: {
                    "live": live_by_account[name],
                    "accepted": counters.accepted_by_account[name],
                    "rateLimited": counters.rate_limited_by_account[name],
                }
                for name in accounts
            },
            "faultsInjected": dict(sorted(counters.faults_injected.items())),
        },
    }


def _billed_seconds(devices: Iterable[Device], now: float) -> float:
    return sum(
        (d.terminated_at if d.terminated_at is not None else now) - d.created_at for d in devices
    )
