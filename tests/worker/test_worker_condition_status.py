"""`devicepool_pool_condition_status`: a condition's status, `Unknown` included, one series each.

`devicepool_pool_condition` is 1 for True and 0 for anything else, so a pool
that cannot list its devices (`Ready=Unknown`) looked like one merely below
its size; the blind-pool alert needs the difference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from devicepool.api.names import browser_pool_workflow_id, pool_workflow_id
from tests.helpers.metrics import Execution, Samples, collected, listed

CONDITIONS = [
    {"type": "Ready", "status": "Unknown", "reason": "NotObserved"},
    {"type": "TeardownBlocked", "status": "True", "reason": "ServerError"},
    {"type": "Progressing", "status": "False", "reason": "Stable"},
]


class OnePool:
    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        yield listed(
            pool_workflow_id("blind"), platform="ios", desired=2, ready=2, phase="Degraded"
        )

    def get_workflow_handle(self, workflow_id: str) -> Any:
        class _Handle:
            async def query(self, name: str, **_: Any) -> dict[str, Any]:
                return {"readyDevices": 2, "conditions": CONDITIONS}

        return _Handle()


async def samples() -> Samples:
    return await collected(OnePool())


async def test_each_condition_has_one_series_a_status_and_1_for_the_current_one() -> None:
    seen = await samples()
    statuses = {
        (dict(labels)["type"], dict(labels)["status"]): value
        for (name, labels), value in seen.items()
        if name == "devicepool_pool_condition_status"
    }
    assert statuses == {
        ("Ready", "True"): 0,
        ("Ready", "False"): 0,
        ("Ready", "Unknown"): 1,
        ("TeardownBlocked", "True"): 1,
        ("TeardownBlocked", "False"): 0,
        ("TeardownBlocked", "Unknown"): 0,
        ("Progressing", "True"): 0,
        ("Progressing", "False"): 1,
        ("Progressing", "Unknown"): 0,
    }
    labels = {
        "pool": "blind",
        "platform": "ios",
        "kind": "DevicePool",
        "type": "Ready",
        "status": "Unknown",
    }
    assert ("devicepool_pool_condition_status", frozenset(labels.items())) in seen


async def test_the_true_or_not_gauge_is_unchanged() -> None:
    seen = await samples()
    ready = {"pool": "blind", "platform": "ios", "kind": "DevicePool", "type": "Ready"}
    blocked = {**ready, "type": "TeardownBlocked"}
    assert seen[("devicepool_pool_condition", frozenset(ready.items()))] == 0
    assert seen[("devicepool_pool_condition", frozenset(blocked.items()))] == 1


class OneOfEach(OnePool):
    """A DevicePool and a BrowserPool of the same name: two pools, told apart by `kind`."""

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        if "BrowserPool" in query:
            yield listed(browser_pool_workflow_id("blind"))
            return
        async for execution in super().list_workflows(query):
            yield execution

    def get_workflow_handle(self, workflow_id: str) -> Any:
        if not workflow_id.startswith("browserpool/"):
            return super().get_workflow_handle(workflow_id)

        class _Handle:
            async def query(self, name: str, **_: Any) -> dict[str, Any]:
                return {
                    "phase": "Degraded",
                    "desiredReplicas": 6,
                    "readyProfiles": 3,
                    "openProfiles": 3,
                    "lostProfiles": 3,
                    "conditions": [{"type": "Ready", "status": "False"}],
                }

        return _Handle()


async def test_a_browser_pool_is_its_own_series_with_kind_browserpool() -> None:
    seen = await collected(OneOfEach())
    browser = {"pool": "blind", "platform": "browser", "kind": "BrowserPool"}
    assert seen[("devicepool_replicas_desired", frozenset(browser.items()))] == 6
    assert seen[("devicepool_replicas_ready", frozenset(browser.items()))] == 3
    lost = frozenset({**browser, "status": "lost"}.items())
    assert seen[("devicepool_devices", lost)] == 3
    ready_false = frozenset({**browser, "type": "Ready", "status": "False"}.items())
    assert seen[("devicepool_pool_condition_status", ready_false)] == 1
    assert seen[("devicepool_pools", frozenset())] == 1  # DevicePools only, as before
    assert seen[("devicepool_browser_pools", frozenset())] == 1
    device = {"pool": "blind", "platform": "ios", "kind": "DevicePool"}
    assert seen[("devicepool_replicas_desired", frozenset(device.items()))] == 2
