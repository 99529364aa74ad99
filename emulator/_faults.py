"""Injected faults: the settings (`/_emulator/faults`) and the seeded dice that apply them.

`Faults` is what the control plane sets and shows; `FaultDice` draws from a
seeded RNG of its own, so that for one seed device ids do not shift when
faults are switched on, and counts every fault it injects. What a drawn
decision does to a request (delay, early answer, lost response) is the app's
middleware.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devicepool.emulator._base import Dice
from devicepool.emulator._bodies import camel_fields, checked_faults, from_camel
from devicepool.emulator._problems import RATE_LIMITED, ProblemError

DEFAULT_TIMEOUT_SECONDS = 60.0

_FAULT_RATES = (
    "rateLimitRate",
    "serverErrorRate",
    "timeoutRate",
    "provisionFailureRate",
    "provisionStallRate",
)


@dataclass
class Faults:
    rate_limit_rate: float = 0.0
    server_error_rate: float = 0.0
    latency_ms: float = 0.0
    timeout_rate: float = 0.0
    provision_failure_rate: float = 0.0
    # A stalled device stays `provisioning` forever (a wedged boot).
    provision_stall_rate: float = 0.0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def to_json(self) -> dict[str, float]:
        return camel_fields(self)

    @classmethod
    def parse(cls, body: Any) -> Faults:
        """Validate a `POST /_emulator/faults` body; a field left out is switched off."""
        checked = checked_faults(body, rates=_FAULT_RATES)
        return from_camel(cls, checked, lambda _, value: float(value))


@dataclass
class FaultDecision:
    """What the fault injector does to one public request."""

    latency_seconds: float = 0.0
    reject: ProblemError | None = None
    hang_seconds: float | None = None


class FaultDice(Dice):
    """The seeded draws behind every injected fault; `injected` counts hits by name."""

    def decide(self, faults: Faults, *, rate_limit: int) -> FaultDecision:
        """Decide what the faults do to one public request (at most one rejection)."""
        decision = FaultDecision(latency_seconds=faults.latency_ms / 1000)
        if self.draw(faults.rate_limit_rate, "rateLimit"):
            limit = str(rate_limit)
            decision.reject = ProblemError(
                429,
                RATE_LIMITED,
                "rate limited (injected fault)",
                headers={
                    "Retry-After": "1",
                    "RateLimit-Limit": limit,
                    "RateLimit-Remaining": "0",
                    "RateLimit-Reset": "1",
                },
            )
        elif self.draw(faults.server_error_rate, "serverError"):
            decision.reject = ProblemError(500, "server_error", "internal error (injected fault)")
        elif self.draw(faults.timeout_rate, "timeout"):
            decision.hang_seconds = faults.timeout_seconds
        return decision
