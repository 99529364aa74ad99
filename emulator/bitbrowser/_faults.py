"""Injected faults: the settings (`/_emulator/faults`) and the seeded dice that apply them.

Public-API faults (the middleware's): `latencyMs`; `failureRate` (a refusal in
the envelope, `系统繁忙`); `serverErrorRate` (HTTP 500 without the envelope);
`timeoutRate` (the call does its work, then the answer is held
`timeoutSeconds`, like a response lost on the way: a retried create makes a
second profile). Open faults: `openFailures` (the next N opens fail),
`openFailureRate`, `openStuckRate` (the open times out and leaves the profile
stuck `opening`). `phoneShutdownsLost`: the next N `/phone/shutdown` calls are
answered as accepted and never carried out (the phone runs and bills on).
`phoneRequestsPerSecond` overrides the configured budget.
`{}` clears them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicepool.emulator import _base
from devicepool.emulator._bodies import camel_fields, checked_faults, from_camel
from devicepool.emulator._problems import invalid

DEFAULT_TIMEOUT_SECONDS = 60.0
_RATES = ("failureRate", "serverErrorRate", "timeoutRate", "openFailureRate", "openStuckRate")
_COUNTS = ("openFailures", "phoneRequestsPerSecond", "phoneShutdownsLost")


def _count_checked(name: str, value: Any) -> None:
    if name in _COUNTS and (value != int(value) or value < 0):
        raise invalid(f"{name} must be a whole number >= 0")
    if name == "phoneRequestsPerSecond" and value < 1:
        raise invalid("phoneRequestsPerSecond must be >= 1 (null: the configured one)")


def _converted(name: str, value: Any) -> Any:
    if name in _COUNTS:  # phoneRequestsPerSecond: null is the configured budget
        return None if value is None else int(value)
    return float(value)


@dataclass
class Faults:
    latency_ms: float = 0.0
    failure_rate: float = 0.0
    server_error_rate: float = 0.0
    timeout_rate: float = 0.0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    open_failures: int = 0
    open_failure_rate: float = 0.0
    open_stuck_rate: float = 0.0
    phone_requests_per_second: int | None = None
    phone_shutdowns_lost: int = 0

    def to_json(self) -> dict[str, Any]:
        return camel_fields(self)

    @classmethod
    def parse(cls, body: Any) -> Faults:
        """Validate a `POST /_emulator/faults` body; a field left out is switched off."""
        checked = checked_faults(
            body,
            rates=_RATES,
            others=_COUNTS,
            nullable=("phoneRequestsPerSecond",),
            check=_count_checked,
        )
        return from_camel(cls, checked, _converted)


@dataclass
class Decision:
    """What the faults do to one public request."""

    latency_seconds: float = 0.0
    failure: bool = False
    server_error: bool = False
    hang_seconds: float | None = None


class Dice(_base.Dice):
    """The seeded draws behind every injected fault; `injected` counts hits by name."""

    def decide(self, faults: Faults) -> Decision:
        decision = Decision(latency_seconds=faults.latency_ms / 1000)
        if self.draw(faults.server_error_rate, "serverError"):
            decision.server_error = True
        elif self.draw(faults.failure_rate, "failure"):
            decision.failure = True
        elif self.draw(faults.timeout_rate, "timeout"):
            decision.hang_seconds = faults.timeout_seconds
        return decision

    def open_outcome(self, faults: Faults) -> str:
        """`ok`, `failed` (back to closed) or `stuck` (left `opening`) for one open."""
        if faults.open_failures > 0:
            faults.open_failures -= 1
            self.injected["openFailure"] += 1
            return "failed"
        if self.draw(faults.open_stuck_rate, "openStuck"):
            return "stuck"
        if self.draw(faults.open_failure_rate, "openFailure"):
            return "failed"
        return "ok"

    def shutdown_lost(self, faults: Faults) -> bool:
        """One `/phone/shutdown` accepted and never carried out (`phoneShutdownsLost`)."""
        if faults.phone_shutdowns_lost <= 0:
            return False
        faults.phone_shutdowns_lost -= 1
        self.injected["phoneShutdownLost"] += 1
        return True
