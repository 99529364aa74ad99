"""Injected faults: the settings (`POST /_emulator/faults`) and the seeded dice behind them.

Whole calls: `latencyMs` (before the work), `serverErrorRate` (50000 in the envelope),
`concurrencyRate` (47002 in the envelope); `timeoutRate` / `timeouts` (the next N calls): the
call does its work and succeeds, then its answer is held `timeoutSeconds` (a client times out
with the change applied), only on `timeoutPaths` when given (e.g. `["phone/addNew"]`).
Batch items (of `phone/addNew`, `start`, `stop`, `delete`): `itemFailureRate` /
`itemFailures` (the next N items) fail with `itemFailureCode` (default 40000) while the
envelope says code 0. Starts: `startProxyFailureRate` / `startProxyFailures` (45002),
`startResourceFailureRate` / `startResourceFailures` (47002). `{}` clears them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from devicepool.emulator import _base
from devicepool.emulator._bodies import camel, is_number
from devicepool.emulator._problems import invalid

DEFAULT_TIMEOUT_SECONDS = 60.0
# A held call still ends: a day at most (a client's timeout is far shorter).
_MOST = {"timeoutSeconds": 86_400.0, "latencyMs": 600_000.0}
BATCH_PATHS = ("phone/addNew", "phone/start", "phone/stop", "phone/delete")


@dataclass
class Faults:
    latency_ms: float = 0.0
    server_error_rate: float = 0.0
    concurrency_rate: float = 0.0
    timeout_rate: float = 0.0
    timeouts: int = 0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    timeout_paths: list[str] = field(default_factory=list)
    item_failure_rate: float = 0.0
    item_failures: int = 0
    item_failure_code: int = 40000
    start_proxy_failure_rate: float = 0.0
    start_proxy_failures: int = 0
    start_resource_failure_rate: float = 0.0
    start_resource_failures: int = 0

    def to_json(self) -> dict[str, Any]:
        return {camel(f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def parse(cls, body: Any) -> Faults:
        """Validate a faults body; a field left out is switched off. Nothing changes on error."""
        if not isinstance(body, dict):
            raise invalid("faults must be a JSON object")
        names = {camel(f.name): f for f in fields(cls)}
        unknown = sorted(set(body) - set(names))
        if unknown:
            raise invalid(f"unknown fault fields {unknown}; known: {sorted(names)}")
        given: dict[str, Any] = {}
        for name, value in body.items():
            f = names[name]
            if name == "timeoutPaths":
                if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
                    raise invalid("timeoutPaths must be a list of paths, e.g. ['phone/addNew']")
                given[f.name] = [p.strip("/") for p in value]
                continue
            if not is_number(value) or not math.isfinite(value):
                raise invalid(f"{name} must be a number")
            if name.endswith("Rate") and not 0 <= value <= 1:
                raise invalid(f"{name} must be between 0 and 1")
            if f.type in ("int", int):
                if value != int(value) or value < 0:
                    raise invalid(f"{name} must be a whole number >= 0")
                value = int(value)
                if name == "itemFailureCode" and value == 0:
                    raise invalid("itemFailureCode must be a failure code (not 0)")
            elif value < 0 or (name == "timeoutSeconds" and value == 0):
                raise invalid(
                    f"{name} must be > 0" if name == "timeoutSeconds" else f"{name} must be >= 0"
                )
            if value > _MOST.get(name, value):
                raise invalid(f"{name} must be <= {_MOST[name]:g}")
            given[f.name] = value
        return cls(**given)


class Dice(_base.Dice):
    """The seeded draws behind every injected fault; `injected` counts hits by name."""

    def counted(self, faults: Faults, attr: str, rate: float, name: str) -> bool:
        """The next-N counter `attr` first, then the rate."""
        left = getattr(faults, attr)
        if left > 0:
            setattr(faults, attr, left - 1)
            self.injected[name] += 1
            return True
        return self.draw(rate, name)

    def call_refusal(self, faults: Faults) -> int | None:
        """An envelope code to refuse a whole call with, or None."""
        if self.draw(faults.server_error_rate, "serverError"):
            return 50000
        if self.draw(faults.concurrency_rate, "concurrency"):
            return 47002
        return None

    def hang(self, faults: Faults, path: str) -> float | None:
        """Seconds to hold a successful call's answer, or None."""
        paths = faults.timeout_paths
        if paths and not any(path == p or path.endswith("/" + p) for p in paths):
            return None
        if self.counted(faults, "timeouts", faults.timeout_rate, "timeout"):
            return faults.timeout_seconds
        return None

    def item_failure(self, faults: Faults) -> int | None:
        if self.counted(faults, "item_failures", faults.item_failure_rate, "itemFailure"):
            return faults.item_failure_code
        return None

    def start_failure(self, faults: Faults) -> int | None:
        if self.counted(
            faults, "start_proxy_failures", faults.start_proxy_failure_rate, "startProxy"
        ):
            return 45002
        if self.counted(
            faults, "start_resource_failures", faults.start_resource_failure_rate, "startResource"
        ):
            return 47002
        return None
