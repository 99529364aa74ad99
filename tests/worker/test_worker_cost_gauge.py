"""`devicepool_pool_hourly_cost_dollars`: what a pool's devices bill an hour now, per pool.

Issue 43 item 13: the spend was in `get`'s `$/H` and `devicepool cost`, but nothing an
alert could read. The gauge is the status's `hourlyCost` (the burn rate, what a budget
alert compares); a BrowserPool has none, and a value that is not a finite amount of 0 or
more is no sample.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from devicepool.api.names import browser_pool_workflow_id, pool_workflow_id
from tests.helpers.metrics import Execution, collected, listed

GAUGE = "devicepool_pool_hourly_cost_dollars"


class Pools:
    """DevicePools `rates` (name -> the status's hourlyCost) and a BrowserPool `shop`."""

    def __init__(self, rates: dict[str, Any]) -> None:
        self.rates = rates

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        if "BrowserPool" in query:
            yield listed(browser_pool_workflow_id("shop"))
            return
        for name in self.rates:
            yield listed(
                pool_workflow_id(name), platform="android", desired=3, ready=3, phase="Ready"
            )

    def get_workflow_handle(self, workflow_id: str) -> Any:
        rates = self.rates

        class _Handle:
            async def query(self, name: str, **_: Any) -> dict[str, Any]:
                if workflow_id == browser_pool_workflow_id("shop"):
                    return {"phase": "Ready", "desiredReplicas": 2, "readyProfiles": 2}
                pool = workflow_id.split("/", 1)[1]
                return {"readyDevices": 3, "hourlyCost": rates[pool], "costToDate": 1.5}

        return _Handle()


async def test_each_device_pool_serves_its_hourly_cost() -> None:
    seen = await collected(Pools({"us": 0.3, "idle": 0.0}))
    costs = {
        dict(labels)["pool"]: (dict(labels), v) for (n, labels), v in seen.items() if n == GAUGE
    }
    assert set(costs) == {"us", "idle"}  # the BrowserPool bills nothing a pool counts
    labels, value = costs["us"]
    assert value == pytest.approx(0.3)
    assert labels == {"pool": "us", "platform": "android", "kind": "DevicePool"}
    assert costs["idle"][1] == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "0.3", None, True, [1]])
async def test_a_cost_that_is_no_amount_is_no_sample(bad: Any) -> None:
    seen = await collected(Pools({"odd": bad, "us": 0.3}))
    pools = {dict(labels)["pool"] for (n, labels), _ in seen.items() if n == GAUGE}
    assert pools == {"us"}
