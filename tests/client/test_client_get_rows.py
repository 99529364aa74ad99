"""`get` and `get -w` read each pool's row from its memo, in the List call that finds it: no
query per pool (issue 42). A pool without a row (a build before it, a row too large) is asked,
as before; `-o json|yaml` prints the whole status, which only the pool has."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from devicepool.api.names import MEMO_POOL_ROW
from devicepool.client.errors import EXIT_OK
from devicepool.workflows.reconciler.row_memo import pool_row
from devicepool.workflows.reconciler.search_attributes import (
    KEY_ACCOUNT,
    KEY_DESIRED,
    KEY_PHASE,
    KEY_PLATFORM,
    KEY_READY,
    KEY_REGION,
)
from tests.client.test_client_both_kinds import Pool, Temporal, browser, device, temporal
from tests.helpers.cli import cli, watch_get

__all__ = ["temporal"]  # the fixture, used by name

# A rolling-out DevicePool with leases, counts of every column, a cost.
ROLLING = {
    "phase": "Ready",
    "desiredReplicas": 4,
    "readyDevices": 3,
    "busyDevices": 1,
    "provisioningDevices": 1,
    "pendingDevices": 1,
    "offlineDevices": 1,
    "updatedDevices": 2,
    "hourlyCost": 1.25,
    "costToDate": 40.0,
    "leasedDevices": 1,
    "leasesQueued": 0,
    "deviceIds": ["d-1", "d-2", "d-3", "d-4"],
    "conditions": [{"type": "RollingOut", "status": "True", "reason": "Drifted", "message": "x"}],
}


class Remembered(Pool):
    """A pool of this build: the List call brings its row (the memo) and search attributes."""

    def __init__(self, made: Pool, *, platform: str | None = None) -> None:
        super().__init__(made.id, made.answers)
        spec = made.answers["spec"]
        created = datetime.fromisoformat(spec["createdAt"])
        row = pool_row(made.answers["status"], created_at=created)
        self.memo = json.loads(json.dumps(row))  # as a memo payload reads back
        status = made.answers["status"]
        pairs: list[SearchAttributePair[Any]] = [
            SearchAttributePair(KEY_PHASE, status["phase"]),
            SearchAttributePair(KEY_DESIRED, status["desiredReplicas"]),
        ]
        if platform is not None:
            pairs += [
                SearchAttributePair(KEY_PLATFORM, platform),
                SearchAttributePair(KEY_REGION, spec["spec"]["region"]),
                SearchAttributePair(KEY_ACCOUNT, "default"),
                SearchAttributePair(KEY_READY, status["readyDevices"]),
            ]
        self.typed_search_attributes = TypedSearchAttributes(pairs)  # type: ignore[assignment]

    async def memo_value(self, key: str, default: Any = None) -> Any:
        return self.memo if key == MEMO_POOL_ROW else default


def _device(name: str) -> Pool:
    made = device(name)
    made.answers["status"] = dict(ROLLING)
    return made


def _pools() -> list[Pool]:
    return [_device("d1"), _device("d2"), browser("b1")]


def test_get_s_table_from_the_rows_is_the_table_the_queries_made(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.cli import fake_temporal

    fake_temporal(monkeypatch, Temporal(*_pools()))
    code, queried, err = cli(capsys, "get", "-o", "table")
    assert code == EXIT_OK, err
    rows = [
        Remembered(p, platform="android") if p.id.startswith("devicepool/") else Remembered(p)
        for p in _pools()
    ]
    fake_temporal(monkeypatch, Temporal(*rows))
    code, listed, err = cli(capsys, "get", "-o", "table")
    assert code == EXIT_OK, err
    assert listed == queried
    assert "(rollout 2/4)" in listed and "1.25" in listed
    assert [p.queries for p in rows] == [[], [], []]


def test_a_pool_without_a_row_is_asked_the_others_are_not(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    new, old = Remembered(_device("new"), platform="android"), _device("old")
    temporal(new, old)
    code, out, err = cli(capsys, "get", "-o", "table")
    assert code == EXIT_OK, err
    assert (new.queries, sorted(old.queries)) == ([], ["spec", "status"])
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["new", "old"]


def test_get_o_json_prints_the_whole_status_which_only_the_pool_has(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    pool = Remembered(_device("d1"), platform="android")
    temporal(pool)
    code, out, err = cli(capsys, "get", "-o", "json")
    assert code == EXIT_OK, err
    (shown,) = json.loads(out)
    assert shown["status"]["deviceIds"] == ["d-1", "d-2", "d-3", "d-4"]
    assert shown["status"]["costToDate"] == 40.0
    assert sorted(pool.queries) == ["spec", "status"]


def names(out: str) -> list[str]:
    """The first column of each line `get -w` printed: headers and pool names, in order."""
    return [line.split()[0] for line in out.splitlines() if line]


class ListedThrice(Temporal):
    """Temporal whose third List call is the last: then Ctrl-C, as a terminal sends it."""

    def __init__(self, *pools: Pool) -> None:
        super().__init__(*pools)
        self.queries: list[str] = []

    async def list_workflows(self, query: str) -> Any:
        self.queries.append(query)
        if len(self.queries) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        async for pool in super().list_workflows(query):
            yield pool


def test_get_w_refreshes_from_one_list_call_alone(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    pools = [Remembered(_device("d1"), platform="android"), Remembered(browser("b1"))]
    temporal = ListedThrice(*pools)
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "table")
    assert code == EXIT_OK, err
    # One List call a refresh, of both kinds; no pool asked anything.
    assert len(temporal.queries) == 3
    assert all("IN ('DevicePool', 'BrowserPool')" in q for q in temporal.queries)
    assert [p.queries for p in pools] == [[], []]
    assert names(out) == ["NAME", "d1", "NAME", "browserpool/b1"]


def test_get_w_o_json_asks_only_the_pools_whose_row_changed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R11 #2. Off a terminal `get -w` prints JSON: it asked every pool its `spec` and
    `status` on every refresh, two queries a pool every 2 s. The first print asks them all
    (the whole status); after it only a pool whose row changed is asked again."""

    pools = [Remembered(_device(n), platform="android") for n in ("d1", "d2")]
    pools.append(Remembered(browser("b1")))
    temporal = ListedThrice(*pools)
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "json")
    assert code == EXIT_OK, err
    assert len(temporal.queries) == 3  # one List call a refresh
    assert [sorted(p.queries) for p in pools] == [["spec", "status"]] * 3  # the first print's
    shown = [json.loads(chunk) for chunk in out.replace("}\n{", "}\n\x00{").split("\x00")]
    assert [s["metadata"]["name"] for s in shown] == ["d1", "d2", "b1"]
    assert shown[0]["status"]["deviceIds"] == ["d-1", "d-2", "d-3", "d-4"]  # the whole status


class RowMoves(ListedThrice):
    """Temporal whose pool `d2` writes a new row before the second List call."""

    async def list_workflows(self, query: str) -> Any:
        if len(self.queries) == 1:
            moved = self.pools["devicepool/d2"]
            moved.answers["status"] = {**moved.answers["status"], "readyDevices": 4}
            moved.memo = {**moved.memo, "status": {**moved.memo["status"], "readyDevices": 4}}
        async for pool in super().list_workflows(query):
            yield pool


def test_get_w_o_json_asks_a_pool_again_once_its_row_moves(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    pools = [Remembered(_device(n), platform="android") for n in ("d1", "d2")]
    temporal = RowMoves(*pools)
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "json")
    assert code == EXIT_OK, err
    assert [sorted(p.queries) for p in pools] == [
        ["spec", "status"],
        ["spec", "spec", "status", "status"],
    ]
    shown = [json.loads(chunk) for chunk in out.replace("}\n{", "}\n\x00{").split("\x00")]
    assert [(s["metadata"]["name"], s["status"]["readyDevices"]) for s in shown] == [
        ("d1", 3),
        ("d2", 3),
        ("d2", 4),
    ]


class Polled(ListedThrice):
    """Temporal whose task queues have the workers that last polled them so long ago."""

    def __init__(self, *pools: Pool, polled: dict[str, list[tuple[float, str]]]) -> None:
        super().__init__(*pools)
        self.polled = polled  # queue: [(seconds since its last poll, its build or "")]
        self.described: list[str] = []
        self.workflow_service = SimpleNamespace(describe_task_queue=self._describe)
        self.namespace = "default"

    async def _describe(self, request: Any, **_: Any) -> Any:
        from temporalio.api.deployment.v1 import WorkerDeploymentOptions
        from temporalio.api.taskqueue.v1 import PollerInfo
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueResponse

        self.described.append(request.task_queue.name)
        pollers = []
        for ago, build in self.polled.get(request.task_queue.name, []):
            poller = PollerInfo(identity=f"w@{ago}")
            poller.last_access_time.FromDatetime(datetime.now(UTC) - timedelta(seconds=ago))
            if build:
                poller.deployment_options.CopyFrom(
                    WorkerDeploymentOptions(deployment_name="devicepool", build_id=build)
                )
            pollers.append(poller)
        return DescribeTaskQueueResponse(pollers=pollers)


def _on(queue: str, made: Pool, *, pinned: str = "") -> Remembered:
    """A pool of this build on `queue`, pinned to build `pinned` of deployment `devicepool`."""
    platform = "android" if made.id.startswith("devicepool/") else None
    pool = Remembered(made, platform=platform)
    pool.task_queue = queue  # type: ignore[attr-defined]
    if pinned:
        versioning = [
            SearchAttributePair(_BEHAVIOR, "Pinned"),
            SearchAttributePair(_VERSION, f"devicepool:{pinned}"),
        ]
        pool.typed_search_attributes = TypedSearchAttributes(  # type: ignore[assignment]
            [*pool.typed_search_attributes, *versioning]
        )
    return pool


_BEHAVIOR = SearchAttributeKey.for_keyword("TemporalWorkflowVersioningBehavior")
_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")


def test_get_marks_the_rows_of_a_task_queue_no_worker_polls_stale(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R11 #1. A memo row is frozen at its last write: with no worker left, `get`
    read from the rows showed `Ready` as if the pool were maintained. The queries it
    replaced timed out and marked PHASE `?`; now each task queue's workers are asked once
    (DescribeTaskQueue), and a queue none polled lately marks its pools' rows `?`."""
    from tests.helpers.cli import fake_temporal

    pools = [
        _on("devicepool", _device("live")),
        _on("gone", _device("gone")),  # its worker last polled 10 minutes ago
        _on("empty", _device("none")),
        _on("devicepool", _device("pinned"), pinned="old"),  # pinned to a build nobody runs
        _on("devicepool", _device("current"), pinned="new"),
        _on("empty", browser("b1")),
    ]
    temporal = fake_temporal(
        monkeypatch,
        Polled(*pools, polled={"devicepool": [(20, "new"), (900, "old")], "gone": [(600, "")]}),
    )
    code, out, err = cli(capsys, "get", "-o", "table")
    assert code == EXIT_OK, err
    # KIND NAME ... PHASE: a pool's phase is its row's 13th column (BrowserPools: 10th).
    phases = {
        line.split()[1]: line.split()[12 if line.startswith("DevicePool") else 9]
        for line in out.splitlines()
        if line.startswith(("DevicePool", "BrowserPool"))
    }
    assert phases == {
        "live": "Ready",
        "current": "Ready",
        "gone": "Ready?",
        "none": "Ready?",
        "pinned": "Ready?",
        "b1": "Ready?",
    }, out
    assert sorted(temporal.described) == ["devicepool", "empty", "gone"]  # once a queue
    assert [p.queries for p in pools] == [[]] * 6


def test_get_w_asks_a_queue_s_workers_again_only_after_a_while(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    pools = [_on("devicepool", _device("d1")), _on("devicepool", _device("d2"))]
    temporal = Polled(*pools, polled={"devicepool": [(5, "")]})
    code, out, err = watch_get(capsys, monkeypatch, temporal, "-o", "table")
    assert code == EXIT_OK, err
    assert len(temporal.queries) == 3 and temporal.described == ["devicepool"]
    assert "?" not in out
