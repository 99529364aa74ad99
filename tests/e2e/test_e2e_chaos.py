"""Chaos on the embedded stack, in the middle of a scale-up (issue 13).

A `devicepool dev` of the test's own on a new data dir (tests/e2e/e2e_stack.py)
scales a pool up and, once the first creates have landed but before it is
ready, something breaks:

1. only the Temporal dev server is SIGKILLed (0 -> 4): the stack starts it
   again on the same database and ports, and the worker reconnects;
2. the whole stack is stopped with SIGINT, Ctrl-C (4 -> 8), and started again
   on the same data dir: the emulator's devices, idempotency keys and billing
   come back from ``emulator.sqlite``, the pools from ``temporal.db``.

After each the pool ends with exactly its replicas live, creates accepted equal
to the devices it needed (no device rented twice), and no orphan (no live
device labelled with a pool whose workflow is not running). The emulator holds
every create's answer back for a while (`latencyMs`), so creates are really in
flight when the blow lands.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.device_hours import DeviceHours
from tests.e2e.e2e_stack import (
    NO_STATS,
    Stack,
    manifest,
    start_stack,
    stop_stack,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

# Slow enough that a blow lands with creates in flight and devices still booting.
KNOBS = ("--provision-seconds", "4")
CREATE_LATENCY_MS = 700


def faults(stack: Stack, body: dict[str, object]) -> None:
    answer = httpx.post(
        f"http://127.0.0.1:{stack.emulator_port}/_emulator/faults", json=body, timeout=5
    )
    answer.raise_for_status()


def scale_up_under_way(
    stack: Stack, pool: str, replicas: int, device_hours: DeviceHours, tmp: Path
) -> None:
    """Apply `pool` at `replicas` (slow creates); return once its first new creates landed."""
    before = stack.stats()
    faults(stack, {"latencyMs": CREATE_LATENCY_MS})
    device_hours.want(pool, replicas)
    applied = stack.cli("apply", "-f", manifest(tmp, pool, replicas))
    assert applied.returncode == 0, applied.stderr
    wait_until(
        lambda: stack.stats()["creates"]["accepted"] >= before["creates"]["accepted"] + 2,
        timeout=30,
        what="the first creates to land",
    )
    ready = stack.stats()["devices"]["byStatus"].get("ready", 0)
    assert ready < replicas, "the scale-up finished before the blow: nothing was tested"


def converged(stack: Stack, pool: str, replicas: int, after: str) -> None:
    """Exactly `replicas` live and ready, the pool says so, and nothing is orphaned."""
    faults(stack, {})
    # Polled at the emulator (an HTTP GET), then asked of the pool once it holds:
    # each `devicepool get` is a Python process, a second of CPU on a busy machine.
    wait_until(
        lambda: stack.stats()["devices"]["byStatus"] == {"ready": replicas},
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
    stats = stack.stats()
    assert stats["devices"]["byPool"] == {pool: replicas}, (after, stats)
    assert stats["devices"]["byStatus"] == {"ready": replicas}, (after, stats)
    assert stats["terminations"] == 0, (after, stats)
    assert stack.orphans() == {}, after


def test_temporal_killed_then_ctrl_c_mid_scale_up(
    tmp_path_factory: pytest.TempPathFactory, device_hours: DeviceHours
) -> None:
    # One data dir, two blows (one test: each stack start costs seconds of `make test`).
    pool = "chaos"
    data_dir = tmp_path_factory.mktemp("chaos")
    device_hours.start(NO_STATS)  # a new data dir: the emulator starts from nothing
    first = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-1.out", *KNOBS)
    try:
        # 1. Only the Temporal server dies, in the middle of 0 -> 4.
        scale_up_under_way(first, pool, 4, device_hours, data_dir.parent)
        killed = first.temporal_pid()
        worker = first.worker_pid()
        os.kill(killed, signal.SIGKILL)
        wait_until(
            lambda: "restarting it" in first.out.read_text(),
            timeout=20,
            what="the stack to notice its server died",
        )
        assert first.process.poll() is None, first.out.read_text()
        wait_until(
            lambda: first.temporal_pid_or_none() not in (None, killed),
            timeout=30,
            what="a new Temporal server",
        )
        converged(first, pool, 4, "the server was killed")
        kept = first.worker_pid() == worker
        print(f"\nthe worker was {'kept' if kept else 'replaced'} through the server's restart")

        # 2. Ctrl-C in the middle of 4 -> 8; started again on the same data dir.
        scale_up_under_way(first, pool, 8, device_hours, data_dir.parent)
    finally:
        stop_stack(first)
    assert first.process.returncode == 0, first.out.read_text()

    second = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-2.out", *KNOBS)
    try:
        converged(second, pool, 8, "Ctrl-C and a restart")
        # Not deleted: the other e2e tests cover delete, and the emulator's
        # 5-s terminations would add ~12 s to `make test`. The book ends here.
        device_hours.finish(second.stats())
    finally:
        stop_stack(second)
    assert second.process.returncode == 0, second.out.read_text()
