"""End to end: a `devicepool dev` stack stopped and started again on the same data dir.

A stack of its own (not the module stack of test_e2e_dev_stack.py, so the two
run side by side): started with `--apply` as `make demo` does, scaled by the
user, stopped with SIGINT and started again on the same data dir (on other
ports) with the same `--apply`; then Ctrl-C in the middle of a scale-up
(issue 13) and a third start. The `device_hours` book
(tests/e2e/device_hours.py) checks that creates accepted equal the devices the
pool needed.
"""

from __future__ import annotations

import time

import pytest

from devicepool.testing import wait_until
from tests.helpers.chaos import converged, scale_up_under_way
from tests.helpers.dev_stack import NO_STATS, manifest, start_stack, stop_stack
from tests.helpers.device_hours import DeviceHours

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_a_restarted_dev_stack_keeps_its_pools_devices(
    tmp_path_factory: pytest.TempPathFactory, device_hours: DeviceHours
) -> None:
    # After the module's stack has stopped: a stack of its own, started with
    # `--apply` as `make demo` does, scaled by the user, stopped with SIGINT and
    # started again on the same data dir (on other ports) with the same `--apply`.
    data_dir = tmp_path_factory.mktemp("devicepool-restart")
    example = manifest(data_dir.parent, "e2e-restart", 3)
    device_hours.start(NO_STATS)  # a new data dir: the emulator starts from nothing
    device_hours.want("e2e-restart", 3)
    first = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-1.out", "--apply", example)
    try:
        banner = first.out.read_text()
        assert "devicepool/e2e-restart created (generation 1, replicas 3)" in banner
        assert f"Manifests:        {example} applied (a new data dir)" in banner
        device_hours.want("e2e-restart", 4)
        scaled = first.cli("scale", "e2e-restart", "--replicas", "4")
        assert scaled.returncode == 0, scaled.stderr
        status = wait_until(
            lambda: (s := first.status("e2e-restart")).get("readyDevices") == 4 and s,
            timeout=60,
            what="4 ready devices after the user's scale",
        )
        devices = sorted(status["deviceIds"])
        before = first.stats()
    finally:
        stop_stack(first)
    assert first.process.returncode == 0, first.out.read_text()
    assert (data_dir / "emulator.sqlite").is_file()

    second = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-2.out", "--apply", example)
    try:
        banner = second.out.read_text()
        assert f"Manifests:        {example} not applied: {data_dir} already existed" in banner
        assert "devicepool/e2e-restart" not in banner
        assert second.stats()["devices"] == before["devices"]
        status = wait_until(
            lambda: (s := second.status("e2e-restart")).get("readyDevices") == 4 and s,
            timeout=30,
            what="the pool to report its 4 devices after the restart",
        )
        # The user's scale stands: the example was not applied again.
        assert status["desiredReplicas"] == 4 and status["observedGeneration"] == 2
        assert sorted(status["deviceIds"]) == devices
        time.sleep(2 * 2)  # two more resyncs: nothing rented, nothing replaced
        after = second.stats()
        assert after["devices"]["byPool"] == {"e2e-restart": 4}
        assert after["creates"] == before["creates"]
        assert after["terminations"] == before["terminations"]
        assert after["deviceHoursBilled"] > before["deviceHoursBilled"]
        assert second.orphans() == {}

        # Chaos (issue 13): Ctrl-C in the middle of 4 -> 8, and a start on the same data dir.
        device_hours.want("e2e-restart", 8)
        scale_up_under_way(second, "e2e-restart", 8, data_dir.parent)
    finally:
        stop_stack(second)
    assert second.process.returncode == 0, second.out.read_text()

    third = start_stack(data_dir, data_dir.parent / f"{data_dir.name}-3.out")
    try:
        converged(third, "e2e-restart", 8, after="Ctrl-C mid scale-up and a restart")
        stats = third.stats()
        assert stats["devices"]["live"] == 8
        assert stats["terminations"] == before["terminations"]
        # Not deleted (the other tests cover delete): the book ends on 8 live devices.
        device_hours.finish(stats)
    finally:
        stop_stack(third)
    assert third.process.returncode == 0, third.out.read_text()
