"""A pool whose creates meet a provider's quota holds them until its reset (issue 41).

The provider (the session's emulator behind `TimedASGITransport.quota_until`) refuses the
pool's creates 402 `quota_exceeded` with the quota's name and `resetsAt`; the pool shows
`QuotaExhausted` with when creates resume, asks nothing more of the provider before then,
creates at the reset and the condition goes False by itself. The changed path (behind
`QUOTA_HOLD_PATCH`) is in the pool's history, and every run replays on this build.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.testing import eventually
from devicepool.workflows.pool.kind import QUOTA_HOLD_PATCH
from tests.helpers.histories import replay_every_run
from tests.helpers.pool_waits import converged, delete, false_condition, true_condition
from tests.helpers.settings import FAST
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import start_pool

pytestmark = pytest.mark.devserver

POLL = 0.5
HOLD = timedelta(seconds=12)


async def test_a_used_up_daily_quota_holds_creates_until_its_reset(
    env: WorkflowEnvironment, worker: DeviceActivities, control: httpx.AsyncClient, pool_name: str
) -> None:
    resets = datetime.now(UTC) + HOLD
    TimedASGITransport.quota_until[pool_name] = (resets, "DailyCreateQuota")
    settings = FAST.model_copy(update={"backoff_initial_seconds": 1, "failure_streak_limit": 1})
    handle = await start_pool(env.client, pool_name, 2, settings=settings)
    try:
        held = await eventually(
            lambda: true_condition(handle, "QuotaExhausted"), what="QuotaExhausted", every=POLL
        )
        assert held["reason"] == "DailyCreateQuota", held
        when = resets.isoformat(timespec="seconds").replace("+00:00", "Z")
        assert f"daily create quota is used until {when}; creates resume at" in held["message"]
        provider = [
            c for c in (await handle.query("status"))["conditions"]
            if c["type"] == "ProviderAvailable"
        ]  # fmt: skip
        assert provider and provider[0]["status"] == "True", provider  # not an outage

        await converged(control, pool_name, 2)
        cleared = await eventually(
            lambda: false_condition(handle, "QuotaExhausted"), what="QuotaAvailable", every=POLL
        )
        assert cleared["reason"] == "QuotaAvailable", cleared
        # No request spent against the quota before its reset: only the first batch's.
        arrived = TimedASGITransport.creates_at[pool_name]
        refused = TimedASGITransport.quota_refused[pool_name]
        assert 1 <= refused <= 2, arrived
        assert all(at >= resets for at in arrived[refused:]), (arrived, resets)
        events = (await handle.query("events"))["events"]
        said = [e["reason"] for e in events]
        assert "QuotaExhausted" in said and "QuotaAvailable" in said, said
        # Ended by the creates that landed (said when the batch reports them, before boots).
        ended = [e["message"] for e in events if e["reason"] == "QuotaAvailable"]
        assert ended == ["creates succeed again"], ended
        assert "BackOff" not in said, said  # a quota is no verdict on the region

        await replay_every_run(env.client, handle.id, marked_by=QUOTA_HOLD_PATCH)
    finally:
        await delete(handle, control, pool_name)
