"""Billed vs requested device-hours, and creates accepted vs devices needed, for e2e tests.

A pytest plugin (the root conftest loads it, so tests/deploy uses it too):
the `device_hours` fixture gives a test a `DeviceHours` book; the test says
what each pool asked for and when, and ends it against the emulator's ground
truth (`GET /_emulator/stats`). The terminal summary lists every test's figures
and the worst ratio.

Definitions (the emulator runs at speed 1 in these tests, so its virtual hours
are wall hours):

- **requested** device-hours: for each pool, the replicas it asked for × how
  long it asked for them, summed. A request starts when the test applies or
  scales the pool (just before the command) and ends when the test deletes it
  (just before the command) or ends the book; a scale closes one request and
  opens the next.
- **billed** device-hours: the growth of the emulator's `deviceHoursBilled`
  between the start of the book and its end (every device from its create to
  its termination, as the provider bills it).
- **needed** devices: every increase of a pool's replicas asks for that many new
  devices (0 → 2 → 3 needs 3); a decrease asks for none; the test adds the
  replacements it caused itself. Creates accepted must equal it exactly: more
  is a device rented twice, fewer is a pool that never got what it asked for.

A ratio above 1 is what the pool's own work costs beyond the request: devices
provisioning while the request was already counted, teardown after a delete,
surplus devices waiting for their idle grace, duplicates. It is reported, not
asserted: the e2e knobs make provisioning a large share of such short runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

PROPERTY = "device_hours"


@dataclass
class DeviceHours:
    """One test's book: what its pools asked for, against the provider's ground truth."""

    test: str
    record: Callable[[str, object], None]
    clock: Callable[[], float] = time.monotonic
    requested_seconds: float = 0.0
    needed: int = 0
    _open: dict[str, tuple[float, int]] = field(default_factory=dict)
    _replicas: dict[str, int] = field(default_factory=dict)
    _start: dict[str, Any] | None = None
    report: dict[str, Any] | None = None

    def start(self, stats: dict[str, Any]) -> None:
        """Begin at these stats (the emulator's `GET /_emulator/stats`)."""
        self._start = stats

    def want(self, pool: str, replicas: int) -> None:
        """`pool` asks for `replicas` from now on (an apply or a scale; 0 for a delete)."""
        now = self.clock()
        self._close(pool, now)
        self.needed += max(0, replicas - self._replicas.get(pool, 0))
        self._replicas[pool] = replicas
        if replicas:
            self._open[pool] = (now, replicas)

    def held(self, pool: str, replicas: int) -> None:
        """`pool` already has `replicas` when the book starts (a stack started again on its
        data dir): asked for from now on, none of them needed."""
        self._replicas[pool] = replicas
        self._open[pool] = (self.clock(), replicas)

    def replaced(self, count: int) -> None:
        """The test itself made `count` devices need replacing (e.g. set them offline)."""
        self.needed += count

    def finish(self, stats: dict[str, Any]) -> dict[str, Any]:
        """End at these stats: assert creates accepted == needed; report billed vs requested."""
        assert self._start is not None, "DeviceHours.start() was not called"
        now = self.clock()
        for pool in list(self._open):
            self._close(pool, now)
        accepted = stats["creates"]["accepted"] - self._start["creates"]["accepted"]
        billed = stats["deviceHoursBilled"] - self._start["deviceHoursBilled"]
        requested = self.requested_seconds / 3600
        self.report = {
            "test": self.test,
            "billed": round(billed, 4),
            "requested": round(requested, 4),
            "ratio": round(billed / requested, 3) if requested else None,
            "accepted": accepted,
            "needed": self.needed,
        }
        self.record(PROPERTY, self.report)
        print(f"\n{describe(self.report)}")
        assert accepted == self.needed, (
            f"creates accepted {accepted} != devices the pools needed {self.needed}",
            stats,
        )
        return self.report

    def _close(self, pool: str, now: float) -> None:
        opened = self._open.pop(pool, None)
        if opened is not None:
            since, replicas = opened
            self.requested_seconds += replicas * (now - since)


def describe(report: dict[str, Any]) -> str:
    ratio = "n/a" if report["ratio"] is None else f"{report['ratio']:.3f}"
    return (
        f"device-hours {report['test']}: billed {report['billed']:.4f} h, requested "
        f"{report['requested']:.4f} h, ratio {ratio}; creates accepted {report['accepted']} "
        f"for {report['needed']} needed"
    )


@pytest.fixture
def device_hours(
    request: pytest.FixtureRequest, record_property: Callable[[str, object], None]
) -> DeviceHours:
    return DeviceHours(request.node.name, record_property)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = [
        value
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        if getattr(report, "when", "") == "call"
        for name, value in getattr(report, "user_properties", [])
        if name == PROPERTY
    ]
    if not reports:
        return
    terminalreporter.section("device-hours: billed vs requested (emulator ground truth)")
    for report in reports:
        terminalreporter.line(describe(report))
    rated = [r for r in reports if r["ratio"] is not None]
    if rated:
        worst = max(rated, key=lambda r: r["ratio"])
        terminalreporter.line(f"worst ratio {worst['ratio']:.3f} ({worst['test']})")
