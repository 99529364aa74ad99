"""A references check of the old spec that answers after an apply is not the new spec's.

Review R9: a pool held on a proxy pool the worker does not have checks its references again
each pass. If the apply that fixes `proxy.poolRef` lands while such a check is awaited, the
check's answer (about the old proxy pool) arrived after the apply had cleared the problems,
and the pool published `Ready=False UnknownProxyPool` under the new generation and held its
creates until it checked again (`apply --wait` then stops at once naming the old pool).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.api.names import UPDATE_APPLY
from devicepool.api.v1beta1 import DevicePoolSpec, ObjectMeta
from devicepool.testing import eventually
from devicepool.workflows.pool.messages import Accepted, ApplyRequest
from devicepool.workflows.pool.observe import REFS_OF_ITS_SPEC_PATCH
from tests.helpers.histories import replay_every_run
from tests.workflows.test_pool_absorbed_cancel import SlowRefs, start_own_pool

pytestmark = pytest.mark.devserver


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    conds = {c["type"]: c for c in status.get("conditions") or ()}
    return dict(conds.get("Ready") or {})


async def test_a_check_of_the_old_spec_answering_after_an_apply_is_not_the_new_specs(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    slow = SlowRefs(worker)
    bad = {
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 2,
        "proxy": {"poolRef": "nosuchproxy"},
    }
    handle = None
    try:
        async with slow.serving(env.client, f"refs-{pool_name}") as queue:
            handle = await start_own_pool(env.client, queue, pool_name, bad)

            async def held() -> bool:
                return _ready(await handle.query("status")).get("reason") == "UnknownProxyPool"

            await eventually(held, what="Ready=False UnknownProxyPool")
            slow.armed = True  # the next check of nosuchproxy hangs...
            await asyncio.wait_for(slow.hanging.wait(), 20)
            slow.armed = False
            fixed = DevicePoolSpec.model_validate({**bad, "proxy": {"poolRef": "proxyseller-us"}})
            accepted = await handle.execute_update(
                UPDATE_APPLY,
                ApplyRequest(metadata=ObjectMeta(name=pool_name), spec=fixed),
                result_type=Accepted,
            )
            slow.release.set()  # ...and answers after the apply: unknown proxy pool
            said: list[str] = []

            async def ready() -> bool:
                status = await handle.query("status")
                if int(status.get("observedGeneration") or 0) >= accepted.generation:
                    said.append(str(_ready(status).get("reason")))
                return bool(status["readyDevices"] == 2)

            await eventually(ready, what="2 ready devices", every=0.05)
            assert "UnknownProxyPool" not in said, said
            # The changed path (behind its patch) is in a run's history (a run may have handed
            # over since), and every run replays on this build.
            await replay_every_run(env.client, handle.id, marked_by=REFS_OF_ITS_SPEC_PATCH)
    finally:
        slow.release.set()
        if handle is not None:
            await handle.terminate()
