"""What every emulator's provider object shares, whatever the vendor: seeded random streams, the
dice behind injected faults, the faults and clock of the control plane, config checks, and a
request body read as a JSON object.

Each emulator keeps its own vendor behaviour, its own `Faults` (what they are, how a body is
validated) and its own `/_emulator/` answer shapes; this module imports no vendor package.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

from devicepool.emulator import _clock
from devicepool.emulator._clock import VirtualClock


def seeded_rng(seed: int | None, purpose: str) -> random.Random:
    """A random stream of its own per purpose, so that for one seed ids do not shift when
    faults are switched on."""
    return random.Random() if seed is None else random.Random(f"{seed}:{purpose}")


class Dice:
    """The seeded draws behind every injected fault; `injected` counts hits by name."""

    def __init__(self, rng: random.Random, injected: Counter[str] | None = None) -> None:
        self.rng = rng
        self.injected: Counter[str] = Counter() if injected is None else injected

    def draw(self, rate: float, name: str) -> bool:
        if rate <= 0:  # only consult the RNG when the fault is on: a seed's sequence is stable
            return False
        hit = self.rng.random() < rate
        if hit:
            self.injected[name] += 1
        return hit


class ParsesFaults(Protocol):
    def parse(self, body: Any) -> Any: ...


class ControlPlane:
    """The control plane's faults and clock (`/_emulator/faults`, `/_emulator/clock`), as an
    emulator's provider object carries them: `faults_type` parses a faults body."""

    faults_type: ClassVar[ParsesFaults]
    faults: Any
    clock: VirtualClock

    def now(self) -> float:
        return self.clock.now()

    def set_faults(self, body: Any) -> dict[str, Any]:
        """Replace the faults (nothing changes if `body` is invalid)."""
        self.faults = self.faults_type.parse(body)
        answer: dict[str, Any] = self.faults.to_json()
        return answer

    def clock_json(self) -> dict[str, Any]:
        return _clock.clock_json(self.clock)

    def set_clock(self, body: Any) -> dict[str, Any]:
        return _clock.set_clock(self.clock, body)


def rng_state(saved: Any) -> tuple[Any, ...]:
    """A random stream's state as `Random.setstate` takes it, from its JSON (lists for tuples)."""
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


def check_fields(config: object, names: Iterable[str], *, least: int, finite: bool = False) -> None:
    """A config's `names` are each `least` or more (and `finite`), else ValueError naming it."""
    for name in names:
        value = getattr(config, name)
        if value < least or (finite and not math.isfinite(value)):
            what = "a finite number >= " if finite else ">= "
            raise ValueError(f"{name} must be {what}{least}")


def json_object(raw: bytes, refuse: Callable[[bool], Exception]) -> dict[str, Any]:
    """A request body that must be a JSON object; an empty body is `{}`. Otherwise raises
    `refuse(parsed)`: `parsed` says whether the body was JSON (of another type)."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise refuse(False) from None
    if not isinstance(body, dict):
        raise refuse(True)
    return body
