"""Issue 37 check: a node worker's cloud-phone calls cannot starve its BrowserPool calls.

Cloud-phone calls wait for the node's pacer (1 request a second) inside their activity,
each holding an activity slot. They shared `devicepool-node-NAME`'s slots with the
BrowserPool's listings, so a scale-up of phones left no slot for a listing. Each kind
now has a queue (and slots) of its own, and the workflows dispatch each kind to it.
No server: the node's workers are recorded as built.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr
from temporalio import activity

from devicepool.activities.settings import AccountSettings
from devicepool.api.names import node_task_queue
from devicepool.worker import build
from devicepool.worker.node import (
    NodeOptions,
    node_activities,
    node_phone_activities,
    node_workers,
)
from devicepool.workflows.shared.placement import Route, provider_queue

NODE = "node-1"


def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """Task queue -> the activity names its worker serves, for a node with a phone account."""
    made: list[dict[str, Any]] = []

    def recorded(client: Any, **options: Any) -> Any:
        made.append(options)
        return object()

    monkeypatch.setattr(build, "Worker", recorded)
    options = NodeOptions(
        node=NODE,
        api_key=SecretStr("k"),
        accounts={
            "phones": AccountSettings(
                name="phones", api="bitbrowser", base_url="http://127.0.0.1:54345"
            )
        },
    )
    phones = node_phone_activities(options)
    assert phones is not None
    node_workers(object(), node_activities(options), phones)  # type: ignore[arg-type]
    return {
        o["task_queue"]: {activity._Definition.must_from_callable(f).name for f in o["activities"]}
        for o in made
    }


def test_phone_calls_and_browser_calls_have_queues_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queues = served(monkeypatch)
    browsers = queues[node_task_queue(NODE)]
    # The BrowserPool's calls stay on the node's queue (docs/browserpools.md), alone.
    assert browsers == {
        "node_list_profiles",
        "node_create_profile",
        "node_open_profile",
        "node_delete_profile",
        "node_lease_connect",
    }
    phone_queue = provider_queue(NODE)["task_queue"]
    assert phone_queue != node_task_queue(NODE)
    assert {
        "create_device",
        "list_devices",
        "terminate_device",
        "lease_connect",
        "reset_device",
    } <= queues[phone_queue]
    # Creates and watches of the node's phone accounts go where the node serves them.
    assert Route("phones", NODE).create()["task_queue"] == phone_queue
    assert "watch_devices" in queues[Route("phones", NODE).watch("devicepool")["task_queue"]]
