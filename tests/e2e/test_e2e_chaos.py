"""Chaos on the embedded stack, in the middle of a scale-up (issue 13).

Each test runs a `devicepool dev` of its own on a new data dir (tests/e2e/e2e_stack.py),
applies a pool and, once its first creates have landed but before it is
ready, breaks something:

- the whole stack is stopped with SIGINT (Ctrl-C) and started again on the
  same data dir: the emulator's devices, idempotency keys and billing come
  back from ``emulator.sqlite``, the pools from ``temporal.db``;
- only the Temporal dev server is SIGKILLed: the stack starts it again on the
  same database and ports, and the worker reconnects.

Either way the pool ends with exactly its replicas live, creates accepted equal
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

REPLICAS = 6
# Slow enough that a blow lands with creates in flight and devices still booting.
KNOBS = ("--provision-seconds", "4")
CREATE_LATENCY_MS = 700


def faults(stack: Stack, body: dict[str, object]) -> None:
    answer = httpx.post(
        f"http://127.0.0.1:{stack.emulator_port}/_emulator/faults", json=body, timeout=5
    )
    answer.raise_for_status()


def scale_up_under_way(stack: Stack, pool: str, device_hours: DeviceHours, tmp: Path) -> None:
    """Apply `pool` (REPLICAS, slow creates) and return once its first creates are accepted."""
    faults(stack, {"latencyMs": CREATE_LATENCY_MS})
    device_hours.want(pool, REPLICAS)
    applied = stack.cli("apply", "-f", manifest(tmp, pool, REPLICAS))
    assert applied.returncode == 0, applied.stderr
    wait_until(
        lambda: stack.stats()["creates"]["accepted"] >= 2,
        timeout=30,
        what="the first creates to land",
    )
    ready = stack.stats()["devices"]["byStatus"].get("ready", 0)
    assert ready < REPLICAS, "the scale-up finished before the blow: nothing was tested"


def converged(stack: Stack, pool: str) -> None:
    """Exactly REPLICAS live and ready, the pool says so, and nothing is orphaned."""
    faults(stack, {})
    wait_until(
        lambda: (
            (s := stack.status(pool)).get("readyDevices") == REPLICAS
            and s.get("desiredReplicas") == REPLICAS
        ),
        timeout=60,
        what=f"{REPLICAS} ready devices",
    )
    stats = stack.stats()
    assert stats["devices"]["byPool"] == {pool: REPLICAS}, stats
    assert stats["devices"]["byStatus"] == {"ready": REPLICAS}, stats
    assert stack.orphans() == {}


def delete(stack: Stack, pool: str, device_hours: DeviceHours) -> None:
    device_hours.want(pool, 0)
    deleted = stack.cli("delete", pool, "--wait", "--timeout", "60")
    assert deleted.returncode == 0, deleted.stderr
    stats = stack.stats()
    assert stats["devices"]["live"] == 0
    device_hours.finish(stats)


def test_ctrl_c_mid_scale_up_and_start_again(
    tmp_path_factory: pytest.TempPathFactory, device_hours: DeviceHours
) -> None:
    data_dir = tmp_path_factory.mktemp("chaos-sigint")
    device_hours.start(NO_STATS)  # a new data dir: the emulator starts from nothing
    first = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-1.out", *KNOBS)
    try:
        scale_up_under_way(first, "chaos-sigint", device_hours, data_dir.parent)
    finally:
        stop_stack(first)
    assert first.process.returncode == 0, first.out.read_text()

    second = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-2.out", *KNOBS)
    try:
        converged(second, "chaos-sigint")
        delete(second, "chaos-sigint", device_hours)
    finally:
        stop_stack(second)
    assert second.process.returncode == 0, second.out.read_text()


def test_temporal_killed_mid_scale_up_is_restarted_on_its_database(
    tmp_path_factory: pytest.TempPathFactory, device_hours: DeviceHours
) -> None:
    data_dir = tmp_path_factory.mktemp("chaos-temporal")
    device_hours.start(NO_STATS)
    stack = start_stack(data_dir, data_dir.parent / f"{data_dir.name}.out", *KNOBS)
    try:
        scale_up_under_way(stack, "chaos-temporal", device_hours, data_dir.parent)
        killed = stack.temporal_pid()
        worker = stack.worker_pid()
        os.kill(killed, signal.SIGKILL)
        wait_until(
            lambda: "restarting it" in stack.out.read_text(),
            timeout=20,
            what="the stack to notice its server died",
        )
        assert stack.process.poll() is None, stack.out.read_text()
        restarted = wait_until(
            lambda: (pid := stack.temporal_pid_or_none()) not in (None, killed) and pid,
            timeout=30,
            what="a new Temporal server",
        )
        assert restarted != killed
        converged(stack, "chaos-temporal")
        print(
            "worker kept" if stack.worker_pid() == worker else "worker replaced",
            "through the server's restart",
        )
        delete(stack, "chaos-temporal", device_hours)
    finally:
        stop_stack(stack)
    assert stack.process.returncode == 0, stack.out.read_text()
