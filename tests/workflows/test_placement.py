"""Where an account's provider calls are scheduled (`workflows/shared/placement.py`)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import SecretStr
from temporalio.api.enums.v1 import RetryState
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from devicepool.activities.settings import AccountSettings, PoolSettings
from devicepool.api.names import node_task_queue
from devicepool.worker.node import NodeOptions, node_phone_activities
from devicepool.workflows.shared.placement import (
    NODE_SCHEDULE_TO_START,
    Route,
    provider_queue,
    route,
)
from tests.helpers.activity_errors import activity_error


def test_an_account_without_a_node_schedules_exactly_as_before() -> None:
    # No option at all: the commands of recorded histories stay the same.
    assert provider_queue("") == {}
    assert Route("default").create() == {"task_queue": "devicepool-account-default"}
    assert Route("default").watch("devicepool") == {"task_queue": "devicepool-watch"}


def test_a_node_accounts_calls_go_to_the_node_and_may_wait_a_minute_for_it() -> None:
    short = {
        "task_queue": "devicepool-phones-node-1",
        "schedule_to_start_timeout": NODE_SCHEDULE_TO_START,
    }
    assert NODE_SCHEDULE_TO_START == timedelta(minutes=1)
    assert provider_queue("node-1") == short
    assert Route("phones", "node-1").create() == short
    assert Route("phones", "node-1").watch("devicepool") == {
        "task_queue": "devicepool-phone-watch-node-1",
        "schedule_to_start_timeout": NODE_SCHEDULE_TO_START,
    }


def test_no_nodes_name_makes_another_nodes_queue() -> None:
    """Node `a`'s phone watch queue was `devicepool-node-a-watch`, node `a-watch`'s
    BrowserPool queue: a watch could land on a node worker that does not serve it."""
    names = ["a", "a-watch", "watch", "phones-a", "phone-watch-a", "node-a"]
    queues = [
        q
        for n in names
        for q in (
            node_task_queue(n),
            provider_queue(n)["task_queue"],
            Route("phones", n).watch("devicepool")["task_queue"],
        )
    ]
    assert len(queues) == len(set(queues)), sorted(queues)


def _failed(cause: BaseException) -> ActivityError:
    return activity_error(cause, "list_devices", RetryState.RETRY_STATE_TIMEOUT)


def test_only_a_call_no_node_picked_up_is_a_node_problem() -> None:
    unpicked = _failed(
        TimeoutError("timeout", type=TimeoutType.SCHEDULE_TO_START, last_heartbeat_details=[])
    )
    said = Route("phones", "node-1").problem(unpicked)
    assert said == (
        "NodeUnavailable: node worker 'node-1' took no call in 60s "
        "(is `devicepool worker --node node-1` running?)"
    )
    assert Route("phones").problem(unpicked) is None
    late = _failed(
        TimeoutError("timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    )
    assert Route("phones", "node-1").problem(late) is None
    assert (
        Route("phones", "node-1").problem(_failed(ApplicationError("refused", type="not_found")))
        is None
    )


async def test_a_node_paces_every_account_it_serves_with_one_pacer() -> None:
    accounts = {
        name: AccountSettings(
            name=name, api="bitbrowser", base_url="http://127.0.0.1:54345", api_key=SecretStr("k")
        )
        for name in ("phones-a", "phones-b")
    }
    phones = node_phone_activities(NodeOptions(node="node-1", accounts=accounts))
    assert phones is not None
    pacers = {id(phones._provider(name).phones.pacer) for name in accounts}  # type: ignore[attr-defined]
    assert len(pacers) == 1
    await phones.aclose()
    assert node_phone_activities(NodeOptions(node="node-2")) is None


def test_an_accounts_route_is_read_from_the_settings_in_one_place() -> None:
    settings = PoolSettings(account_nodes={"phones": "node-1"})
    routed, own = route("phones", settings), route("default", settings)
    assert (routed, own) == (Route("phones", "node-1"), Route("default", ""))
    assert routed.provider() == routed.create() == provider_queue("node-1")
    assert routed.watch("devicepool")["task_queue"] == "devicepool-phone-watch-node-1"
    assert (own.provider(), own.create()) == ({}, {"task_queue": "devicepool-account-default"})
    assert own.watch("devicepool") == {"task_queue": "devicepool-watch"}
    silent = _failed(
        TimeoutError("timeout", type=TimeoutType.SCHEDULE_TO_START, last_heartbeat_details=[])
    )
    assert routed.problem(silent) is not None
    assert own.problem(silent) is None
