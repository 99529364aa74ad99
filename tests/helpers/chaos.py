"""Chaos in the middle of a scale-up (issue 13), for the e2e tests: start one, check it converged.

The emulator holds every answer back `CREATE_LATENCY_MS`, so creates are really
in flight when the blow (a SIGKILL, a Ctrl-C) lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devicepool.testing import wait_until
from tests.helpers.dev_stack import Stack, manifest

CREATE_LATENCY_MS = 700


def scale_up_under_way(stack: Stack, pool: str, replicas: int, tmp: Path) -> None:
    """Apply `pool` at `replicas` with slow answers; return once its first new creates landed."""
    before = stack.stats()["creates"]["accepted"]
    stack.faults({"latencyMs": CREATE_LATENCY_MS})
    stack.apply(manifest(tmp, pool, replicas))
    seen: dict[str, Any] = {}

    def landed() -> bool:
        seen.update(stack.stats())
        return bool(seen["creates"]["accepted"] >= before + 2)

    wait_until(landed, timeout=30, what="the first creates to land")
    # Read from the same answer that saw the creates land: on a loaded machine a
    # second read could come after the 2-s boots. (The only pool on its stack:
    # every ready device is one of its.)
    ready = seen["devices"]["byStatus"].get("ready", 0)
    assert ready < replicas, "the scale-up finished before the blow: nothing was tested"


def converged(stack: Stack, pool: str, replicas: int, *, after: str) -> None:
    """Exactly `replicas` of `pool` live and ready, the pool says so, nothing is orphaned."""
    stack.faults({})
    # Polled at the emulator (an HTTP GET), then asked of the pool once it holds:
    # each `devicepool get` is a Python process, a second of CPU on a busy machine.
    wait_until(
        lambda: (
            (d := stack.stats()["devices"])["byPool"].get(pool) == replicas
            and d["byStatus"] == {"ready": d["live"]}
        ),
        timeout=60,
        what=f"{replicas} ready devices after {after}",
    )
    wait_until(
        lambda: (
            (s := stack.status(pool)).get("readyDevices") == replicas
            and s.get("desiredReplicas") == replicas
        ),
        timeout=30,
        what=f"the pool to report {replicas} ready after {after}",
    )
    assert stack.stats()["devices"]["byPool"][pool] == replicas, after
    assert stack.orphans() == {}, after
