"""`devicepool dev --browser-nodes 1 --apply examples/cloud-phones/cloud-phones.yaml`: the
README's first run on cloud phones, on real processes.

The example names the dev account `bitbrowser` (`api: bitbrowser`, served by node-1's
worker) and the dev proxy pool `proxyseller-us`. Its phones are powered on (their
minute-long boot is not waited for), then `delete --wait` shuts them down and says what
the Local API, which has no delete, keeps: the profiles, marked retired.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devicepool.errors import DevicePoolError
from devicepool.testing import wait_until
from tests.e2e.test_e2e_dev_browser_nodes import _node_url
from tests.helpers.dev_stack import start_stack, stop_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cloud-phones" / "cloud-phones.yaml"


def test_the_cloud_phone_example_powers_three_phones_on_and_delete_says_what_it_kept(
    tmp_path: Path,
) -> None:
    stack = start_stack(
        tmp_path / "dev", tmp_path / "dev.out", "--browser-nodes", "1", "--apply", str(EXAMPLE)
    )
    try:
        out = stack.out.read_text()
        assert "devicepool/cloud-phones created (generation 1, replicas 3)" in out, out
        node = _node_url(out, "node-1")

        def phones() -> dict[str, Any]:
            return dict(httpx.get(f"{node}/_emulator/stats", timeout=10).json()["phones"])

        def booting() -> bool:
            try:
                status = stack.status("cloud-phones")
            except DevicePoolError:  # not started yet
                return False
            # .get: a status read while no worker answers is the stale one, without counts.
            made = (status.get("provisioningDevices") or 0) + (status.get("readyDevices") or 0)
            return bool(made == 3)

        # Polled in process (`Stack.status`, the call behind `get -o json`): a CLI
        # process a poll cost about 0.5 CPU-s. Then the CLI itself says it, once.
        wait_until(booting, timeout=60, every=1, what="3 phones made")

        def cli_says_made() -> dict[str, Any] | None:  # once, unless it answered stale
            done = stack.cli("get", "cloud-phones", "-o", "json")
            if done.returncode != 0:
                return None
            status = json.loads(done.stdout)["status"]
            made = status.get("provisioningDevices", 0) + status.get("readyDevices", 0)
            return status if made == 3 else None

        status = wait_until(cli_says_made, timeout=30, every=2, what="the CLI: 3 phones made")
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "BelowDesired", ready  # booting, not refused
        made = wait_until(
            lambda: (p := phones())["powerOns"] == 3 and p, timeout=30, what="3 power-ons"
        )
        assert made["created"] == 3, made

        deleted = stack.cli("delete", "cloud-phones", "--wait", "--timeout", "90")
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.splitlines()[-2:] == [
            "devicepool/cloud-phones deleted (0 devices left)",
            "3 cloud-phone profile(s) kept, powered off and marked retired: "
            "the BitBrowser Local API has no delete",
        ], deleted.stdout
        left = phones()
        assert (left["running"], left["profiles"], left["created"]) == (0, 3, 3), left
        assert left["maxRequestsPerSecond"] <= 1 and left["rateLimited"] == 0, left
    finally:
        stop_stack(stack)
    assert stack.process.returncode == 0, stack.out.read_text()
