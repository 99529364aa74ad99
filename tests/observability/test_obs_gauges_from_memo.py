"""The pool gauges read each pool's memo row from the listing, not its `status` query
(issue 42), and show what they showed from the queries: the same families, sample for sample.

The same statuses go through both paths: a pool listed without a row (a build before it) is
asked `status` (and `spec`, `leases`), as before; one listed with the row its workflow writes
(`row_memo.pool_row`) is asked nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devicepool.api.names import (
    MEMO_POOL_ROW,
    NODE_REGISTRY_WORKFLOW_ID,
    QUERY_NODES,
    browser_pool_workflow_id,
    pool_workflow_id,
)
from devicepool.api.v1beta1 import LeaseSpec
from devicepool.workflows.reconciler.row_memo import LeaseFacts, pool_row
from tests.helpers.metrics import Execution, listed
from tests.observability.test_obs_lease_gauges import NOW, Scraper, spec, status, ticket

P1, B1 = pool_workflow_id("p1"), browser_pool_workflow_id("b1")

STATUSES: dict[str, dict[str, Any]] = {
    P1: status(
        desiredReplicas=4,
        readyDevices=2,
        busyDevices=1,
        provisioningDevices=1,
        pendingDevices=2,
        offlineDevices=1,
        hourlyCost=1.5,
        costToDate=44.25,
        lastReconciled="2026-12-05T16:59:58Z",
        deviceIds=["d1", "d2", "d3", "d4", "d5"],
        leasedDevices=1,
        leasesQueued=2,
        oldestQueuedSeconds=20,
        leasesExpired=5,
        conditions=[
            {"type": "Ready", "status": "False", "reason": "Provisioning", "message": "2 of 4"},
            {"type": "ProviderAvailable", "status": "Unknown", "reason": "ListFailed"},
            {"type": "SpendCapReached", "status": "True", "reason": "MaxDevices"},
        ],
    ),
    B1: status(
        desiredReplicas=3,
        readyProfiles=2,
        openProfiles=1,
        lostProfiles=1,
        byNode={"node-1": 2, "node-2": 1},
        profileIds=["a", "b", "c"],
        leasedDevices=0,
        leasesQueued=0,
        leasesExpired=0,
        conditions=[{"type": "NodesAvailable", "status": "True", "reason": "NodesAlive"}],
    ),
}
SPECS = {P1: spec(queue={"maxWait": "2m"}), B1: spec()}
TICKETS = [
    ticket("2026-12-05T16:59:30Z", "2026-12-05T17:01:30Z"),
    ticket("2026-12-05T16:59:50Z", "2026-12-05T17:01:50Z"),
]
LEASES = {P1: {"leases": [], "tickets": TICKETS}}


def _row(workflow_id: str) -> dict[str, Any]:
    """The row the pool's workflow writes for its status (`Reconciler.show_row`)."""
    said = STATUSES[workflow_id]
    tickets = LEASES.get(workflow_id, {}).get("tickets") or []
    rules = LeaseSpec.model_validate(SPECS[workflow_id]["spec"].get("leases") or {})
    oldest = (
        (
            datetime.fromisoformat(tickets[0]["createdAt"]),
            datetime.fromisoformat(tickets[0]["deadline"]),
        )
        if tickets
        else None
    )
    leases = LeaseFacts(
        leased=said["leasedDevices"],
        queued=said["leasesQueued"],
        expired=said["leasesExpired"],
        oldest=oldest,
        max_wait=rules.queue.max_wait,
    )
    row = pool_row(said, created_at=datetime.fromisoformat("2026-12-01T00:00:00Z"), leases=leases)
    return dict(json.loads(json.dumps(row)))  # as the memo payload reads back


@dataclass
class Listed:
    """The two pools, listed with their rows in their memos or without; every query counted."""

    rows: bool
    asked: Counter[tuple[str, str]] = field(default_factory=Counter)

    async def list_workflows(self, query: str) -> AsyncIterator[Execution]:
        wid = B1 if "BrowserPool" in query else P1
        said = STATUSES[wid]
        yield listed(
            wid,
            platform="android" if wid == P1 else None,
            desired=said["desiredReplicas"],
            ready=said.get("readyDevices", said.get("readyProfiles")),
            phase=said["phase"],
            memo={MEMO_POOL_ROW: _row(wid)} if self.rows else {},
        )

    def get_workflow_handle(self, workflow_id: str) -> Any:
        fake = self

        class _Handle:
            async def query(self, name: str, **_: Any) -> Any:
                fake.asked[(workflow_id, name)] += 1
                answers = {"status": STATUSES, "spec": SPECS, "leases": LEASES}
                answer = answers.get(name, {}).get(workflow_id)
                if answer is None:
                    raise RuntimeError(f"no answer to {name} of {workflow_id}")
                return answer

        return _Handle()


async def test_the_gauges_from_the_rows_are_the_gauges_from_the_queries() -> None:
    queried, listed = Listed(rows=False), Listed(rows=True)
    before, after = Scraper(queried), Scraper(listed)  # type: ignore[arg-type]
    for scraper in (before, after):
        scraper.now = NOW
        await scraper.refresh()
    old, new = before.samples(), after.samples()
    assert new == old
    # Every family a pool has is in it (a test that compares two empty sets proves nothing).
    names = {name for name, labels in old if ("pool", "p1") in labels or ("pool", "b1") in labels}
    assert names >= {
        "devicepool_replicas_desired",
        "devicepool_replicas_ready",
        "devicepool_pool_phase",
        "devicepool_devices",
        "devicepool_pool_condition",
        "devicepool_pool_condition_status",
        "devicepool_node_profiles",
        "devicepool_pool_hourly_cost_dollars",
        "devicepool_leases_active",
        "devicepool_leases_queued",
        "devicepool_leases_oldest_queued_seconds",
        "devicepool_leases_queue_max_wait_seconds",
        "devicepool_leases_expired_total",
    }
    # The oldest ticket goes on with the clock from the row as from the `leases` query.
    before.now = after.now = NOW + 45
    assert after.samples() == before.samples()
    # From the rows: no pool was asked anything (the node registry's beats: one query).
    assert queried.asked[(P1, "status")] == 1
    assert set(listed.asked) == {(NODE_REGISTRY_WORKFLOW_ID, QUERY_NODES)}, listed.asked
