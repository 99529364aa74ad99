"""The SDK sends an activity's heartbeats at most every min(0.8 × its heartbeat timeout,
the worker's `max_heartbeat_throttle_interval`). At the SDK's default cap (60 s) a watch
beats every minute whatever its timeout, 120 billed Actions a pool-hour for the pool's
watch and its health check's: every worker devicepool builds lifts the cap, so a watch beats
every 0.8 × its own timeout (docs/scaling.md, 'Heartbeats')."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.worker import Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.worker import build
from devicepool.worker.config import build_config
from devicepool.workflows.shared.heartbeats import watch_heartbeat_timeout

WEEK = 7 * 24 * 3600.0  # the longest interval a worker config takes


def test_every_worker_beats_at_its_activities_own_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []

    def recorded(client: Any, **options: Any) -> Worker:
        made.append(options)
        return object()  # type: ignore[return-value]

    monkeypatch.setattr(build, "Worker", recorded)
    config = build_config(
        {"accounts": {"default": {"baseUrl": "http://x", "apiKeyEnv": "K"}}}, env={"K": "k"}
    )
    build.build_workers(config, object(), DeviceActivities(accounts={}, proxy_pools={}))  # type: ignore[arg-type]
    build.new_worker(object(), task_queue="q", activities=[])  # type: ignore[arg-type]
    assert len(made) >= 4
    longest = watch_heartbeat_timeout(WEEK)
    for options in made:
        cap = options.get("max_heartbeat_throttle_interval", timedelta(seconds=60))
        assert cap >= 0.8 * longest, options["task_queue"]
    # A test (or a bench) may still ask for its own.
    build.new_worker(
        object(),  # type: ignore[arg-type]
        task_queue="q",
        activities=[],
        max_heartbeat_throttle_interval=timedelta(seconds=1),
    )
    assert made[-1]["max_heartbeat_throttle_interval"] == timedelta(seconds=1)
