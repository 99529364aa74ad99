"""Every pool command, for both kinds, against an in-process Temporal of pools by workflow id.

How a command names its pool (`browserpool/NAME`, `devicepool/NAME`, a bare
NAME, `browserpools`) decides which kind it reaches; a bare NAME that only a
BrowserPool has reaches it, and one both kinds have is refused by a command
that changes a pool. Each line and exit code here is what the CLI printed
before the kind registry (issue 38): the registry must not change one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME
from tests.helpers.cli import cli, fake_temporal

STARTED = datetime(2025, 1, 1, tzinfo=UTC)


class Pool:
    """One running pool workflow: its query answers, and what was asked of it."""

    def __init__(self, workflow_id: str, answers: dict[str, Any]) -> None:
        self.id, self.answers = workflow_id, answers
        self.updates: list[tuple[str, Any]] = []
        self.queries: list[str] = []
        self.cancelled = False
        self.typed_search_attributes = SimpleNamespace(get=lambda key: None)
        self.start_time = STARTED

    async def describe(self) -> Any:
        return SimpleNamespace(
            status=WorkflowExecutionStatus.RUNNING,
            id=self.id,
            run_id="r",
            task_queue="devicepool",
            start_time=STARTED,
            history_length=3,
            typed_search_attributes=self.typed_search_attributes,
        )

    async def query(self, name: str, *, result_type: Any = dict, **_: Any) -> Any:
        self.queries.append(name)
        if name not in self.answers:  # no worker answers it
            from temporalio.client import RPCTimeoutOrCancelledError

            raise RPCTimeoutOrCancelledError("query timed out")
        answer = self.answers[name]
        return answer if result_type in (dict, None) else result_type.model_validate(answer)

    async def execute_update(self, name: str, request: Any = None, **_: Any) -> Any:
        from devicepool.workflows.pool.messages import Accepted

        self.updates.append((name, request))
        return Accepted(generation=2, replicas=getattr(request, "replicas", 2))

    async def cancel(self) -> None:
        self.cancelled = True


class Missing(Pool):
    async def describe(self) -> Any:
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")


class Temporal:
    """Pools by workflow id; any other id is not found."""

    def __init__(self, *pools: Pool) -> None:
        self.pools = {p.id: p for p in pools}
        self.service_client = SimpleNamespace(config=SimpleNamespace(target_host="fake:7233"))
        self.data_converter = SimpleNamespace(payload_codec=None)  # keys: nothing asked
        self.started: list[str] = []

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Pool:
        return self.pools.get(workflow_id) or Missing(workflow_id, {})

    async def list_workflows(self, query: str) -> Any:
        for pool in self.pools.values():
            if f"'{_type(pool.id)}'" in query:  # `WorkflowType = 'X'`, or `IN ('X', ...)`
                yield pool

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, **_: Any) -> Any:
        from temporalio.exceptions import WorkflowAlreadyStartedError

        if id in self.pools:
            raise WorkflowAlreadyStartedError(id, workflow)
        self.started.append(id)
        return None

    async def execute_update_with_start_workflow(self, *_: Any, **__: Any) -> Any:
        from devicepool.workflows.pool.messages import Accepted

        return Accepted(generation=1, replicas=2, result="created")


def _type(workflow_id: str) -> str:
    return "BrowserPool" if workflow_id.startswith("browserpool/") else "DevicePool"


def device(name: str) -> Pool:
    return Pool(
        f"devicepool/{name}",
        {
            "spec": {
                "spec": {
                    "provider": {"name": "bitcloudphone", "account": "default"},
                    "platform": "android",
                    "region": "us-west",
                    "osVersion": "14",
                    "replicas": 2,
                },
                "metadata": {"name": name},
                "createdAt": "2025-01-01T00:00:00+00:00",
            },
            "status": {"phase": "Ready", "desiredReplicas": 2, "readyDevices": 2},
            "devices": {
                "devices": [
                    {
                        "id": "d-1",
                        "status": "ready",
                        "region": "us-west",
                        "createdAt": "2025-01-01T00:00:00Z",
                    }
                ]
            },
            "events": {"events": []},
        },
    )


def browser(name: str) -> Pool:
    return Pool(
        f"browserpool/{name}",
        {
            # What the shell's `spec` query answers (workflows/reconciler/shell.py):
            # a creation unlike the run's start (`STARTED`), as after a continue-as-new.
            "spec": {
                "metadata": {"name": name, "labels": {"team": "web"}, "annotations": {}},
                "spec": {"replicas": 2, "nodeSelector": {"os": "windows"}},
                "generation": 1,
                "createdAt": "2024-12-31T00:00:00+00:00",
            },
            "status": {
                "phase": "Ready",
                "desiredReplicas": 2,
                "readyProfiles": 2,
                "openProfiles": 2,
                "byNode": {"n1": 2},
            },
            "devices": {"profiles": [{"id": "p-1", "slot": 0, "node": "n1", "open": True}]},
            "events": {"events": [{"type": "Normal", "reason": "Created", "message": "x"}]},
        },
    )


@pytest.fixture
def temporal(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*pools: Pool) -> Temporal:
        return fake_temporal(monkeypatch, Temporal(*pools))

    return install


@pytest.mark.parametrize("named", ["browserpool/b", "BrowserPool/b", "b"])
def test_get_one_browser_pool_by_kind_or_by_a_name_only_it_has(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str
) -> None:
    temporal(browser("b"), device("d"))
    code, out, err = cli(capsys, "get", named, "-o", "json")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert shown["kind"] == "BrowserPool"
    assert shown["apiVersion"] == "mobile.example.com/v1beta1"
    # The pool's own metadata and creation, as a DevicePool's (the run's start is later).
    assert shown["metadata"] == {
        "name": "b",
        "labels": {"team": "web"},
        "annotations": {},
        "creationTimestamp": "2024-12-31T00:00:00Z",
    }
    assert shown["spec"]["nodeSelector"] == {"os": "windows"}
    assert shown["status"]["readyProfiles"] == 2


def test_get_every_pool_shows_a_table_a_kind_devicepools_first(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(browser("b"), device("d"))
    code, out, err = cli(capsys, "get", "-o", "table")
    assert code == EXIT_OK, err
    devices, browsers = out.split("\n\n")
    assert devices.splitlines()[0].split()[:3] == ["KIND", "NAME", "PLATFORM"]
    assert devices.splitlines()[1].split()[:2] == ["DevicePool", "d"]
    assert browsers.splitlines()[0].split() == [
        "KIND",
        *["NAME", "DESIRED", "READY", "LEASED", "OPEN", "LOST", "NODES", "AGE", "PHASE"],
    ]
    assert browsers.splitlines()[1].split()[:2] == ["BrowserPool", "b"]  # the kind said once
    code, out, err = cli(capsys, "get", "-o", "json")
    assert [(p["kind"], p["metadata"]["name"]) for p in json.loads(out)] == [
        ("DevicePool", "d"),
        ("BrowserPool", "b"),
    ]
    code, out, err = cli(capsys, "get", "browserpools", "-o", "table")
    assert code == EXIT_OK, err
    assert [line.split()[0] for line in out.splitlines()] == ["NAME", "b"]  # as `get pods`
    code, out, err = cli(capsys, "get", "browserpool/b", "-o", "table")
    assert code == EXIT_OK, err
    assert [line.split()[0] for line in out.splitlines()] == ["NAME", "browserpool/b"]


def test_get_browserpools_when_there_are_none_says_so(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(device("d"))
    code, out, err = cli(capsys, "get", "browserpools", "-o", "table")
    assert (code, out, err) == (EXIT_OK, "", "No browser pools found.\n")


def test_a_bare_name_both_kinds_have_reads_the_devicepool(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(browser("x"), device("x"))
    code, out, err = cli(capsys, "get", "x", "-o", "json")
    assert code == EXIT_OK, err
    assert json.loads(out)["kind"] == "DevicePool"
    code, out, err = cli(capsys, "devices", "x", "-o", "json")
    assert json.loads(out)[0]["id"] == "d-1"


@pytest.mark.parametrize("named", ["browserpool/b", "b"])
def test_describe_and_devices_of_a_browser_pool(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str
) -> None:
    temporal(browser("b"))
    code, out, err = cli(capsys, "describe", named, "-o", "json")
    assert code == EXIT_OK, err
    described = json.loads(out)
    assert described["kind"] == "BrowserPool"
    assert described["profiles"][0]["id"] == "p-1"
    assert described["events"][0]["reason"] == "Created"
    code, out, err = cli(capsys, "describe", named)
    assert code == EXIT_OK, err
    assert out.startswith("Name:") and "browserpool/b" in out.splitlines()[0]
    assert "Profiles:" in out
    code, out, err = cli(capsys, "devices", named, "-o", "json")
    assert code == EXIT_OK, err
    assert json.loads(out) == [{"id": "p-1", "slot": 0, "node": "n1", "open": True}]
    code, out, err = cli(capsys, "devices", named, "-o", "table")
    assert out.split()[:5] == ["ID", "SLOT", "NODE", "OPEN", "STATE"]


def test_describe_of_a_devicepool_by_its_kind(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(device("d"), browser("d"))
    code, out, err = cli(capsys, "describe", "devicepool/d", "-o", "json")
    assert code == EXIT_OK, err
    described = json.loads(out)
    assert described["kind"] == "DevicePool"
    assert described["workflow"]["id"] == "devicepool/d"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("describe", "nodepool/x"), "error: nodepool/x: unknown kind 'nodepool' (known: "),
        (("describe", "browserpools"), "error: browserpools: name one pool, as browserpool/NAME"),
        (("devices", "devicepools"), "error: devicepools: name one pool, as browserpool/NAME"),
        (("scale", "browserpools", "--replicas", "1"), "error: browserpools: name one pool"),
        (("delete", "nodepool/x"), "error: nodepool/x: unknown kind 'nodepool'"),
        (("get", "nodepool/x"), "error: nodepool/x: unknown kind 'nodepool'"),
    ],
)
def test_a_name_no_kind_has_is_exit_2_before_anything_is_asked(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], line: str
) -> None:
    code, out, err = cli(capsys, *args)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.startswith(line), err


def test_scale_names_the_kind_it_changed(capsys: pytest.CaptureFixture[str], temporal: Any) -> None:
    fake = temporal(browser("b"), device("d"))
    code, out, err = cli(capsys, "scale", "browserpool/b", "--replicas", "3")
    assert (code, out) == (EXIT_OK, "browserpool/b scaled to 3 (generation 2)\n"), err
    code, out, err = cli(capsys, "scale", "b", "--replicas", "4")
    assert (code, out) == (EXIT_OK, "browserpool/b scaled to 4 (generation 2)\n"), err
    code, out, err = cli(capsys, "scale", "d", "--replicas", "5")
    assert (code, out) == (EXIT_OK, "devicepool/d scaled to 5 (generation 2)\n"), err
    assert [r.replicas for _, r in fake.pools["browserpool/b"].updates] == [3, 4]
    assert [r.replicas for _, r in fake.pools["devicepool/d"].updates] == [5]


@pytest.mark.parametrize(
    "args", [("scale", "x", "--replicas", "3"), ("delete", "x"), ("delete", "x", "--wait")]
)
def test_a_change_to_a_bare_name_both_kinds_have_is_refused(
    capsys: pytest.CaptureFixture[str], temporal: Any, args: tuple[str, ...]
) -> None:
    fake = temporal(browser("x"), device("x"))
    code, out, err = cli(capsys, *args)
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err == (
        'error: both a DevicePool and a BrowserPool are named "x": '
        "say devicepool/x or browserpool/x\n"
    )
    assert not any(p.updates or p.cancelled for p in fake.pools.values())


@pytest.mark.parametrize("named", ["browserpool/b", "b"])
def test_delete_a_browser_pool(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str
) -> None:
    fake = temporal(browser("b"))
    code, out, err = cli(capsys, "delete", named)
    assert code == EXIT_OK, err
    assert out == (
        "browserpool/b deleting (every profile is closed and deleted on its node; "
        "`devicepool get browserpool/b` follows it)\n"
    )
    assert fake.pools["browserpool/b"].cancelled


@pytest.mark.parametrize(
    ("named", "line"),
    [
        (
            "browserpool/gone",
            "error: browserpool/gone not found (no running workflow browserpool/gone)",
        ),
        (
            "gone",
            'error: pool "gone" not found (no running DevicePool or BrowserPool of that name)',
        ),
        ("devicepool/gone", 'error: pool "gone" not found (no running workflow devicepool/gone)'),
    ],
)
@pytest.mark.parametrize("command", ["delete", "describe", "devices", "get", "scale"])
def test_a_pool_no_kind_runs_is_not_found_in_its_kind_words(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str, line: str, command: str
) -> None:
    """Changed by issue 43: a bare NAME no kind has named only the DevicePool workflow (on a
    real stack, `scale nope` once said `browserpool/nope not found`), though both were looked
    for."""
    temporal(device("d"))
    extra = ("--replicas", "1") if command == "scale" else ()
    code, out, err = cli(capsys, command, named, *extra)
    assert (code, out, err) == (EXIT_RUNTIME, "", line + "\n")
    if command == "delete":
        code, out, err = cli(capsys, command, named, "--ignore-not-found")
        assert (code, out, err) == (EXIT_OK, "", "")


def test_apply_both_kinds_in_one_file(
    capsys: pytest.CaptureFixture[str], temporal: Any, tmp_path: Path
) -> None:
    fake = temporal(Pool("devicepool-account/default", {}))
    path = tmp_path / "pools.yaml"
    path.write_text(
        "apiVersion: mobile.example.com/v1beta1\nkind: BrowserPool\n"
        "metadata: {name: b}\nspec: {replicas: 1}\n---\n"
        "apiVersion: mobile.example.com/v1beta1\nkind: DevicePool\nmetadata: {name: d}\n"
        "spec: {provider: {name: bitcloudphone, account: default}, platform: android,"
        " region: us-west, osVersion: '14', replicas: 2}\n"
    )
    code, out, err = cli(capsys, "apply", "-f", str(path))
    assert code == EXIT_OK, err
    assert out.splitlines() == [
        "devicepool/d created (generation 1, replicas 2)",
        "browserpool/b created (generation 1, replicas 1)",
    ]
    assert err == "2 pools: 2 created\n"
    assert fake.started == ["devicepool/d", "browserpool/b"]


@pytest.mark.parametrize("named", ["browserpool/b", "devicepool/d"])
def test_a_pool_no_worker_answers_shows_its_search_attributes_marked_stale(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str
) -> None:
    """Changed for BrowserPool by issue 38 (one client): `get browserpool/NAME` was
    `error: ... no worker did answer in time`; a DevicePool always showed this."""
    pool = Pool(named, {})
    attributes = {"DevicePoolDesired": 3, "DevicePoolReady": 1, "DevicePoolPhase": "Provisioning"}
    pool.typed_search_attributes = SimpleNamespace(get=lambda key: attributes.get(key.name))
    temporal(pool)
    code, out, err = cli(capsys, "get", named, "-o", "table")
    assert code == EXIT_OK, err
    header, row = out.splitlines()
    assert row.split()[-1] == "Provisioning?"
    assert row.split()[header.split().index("DESIRED")] == "3"


def test_get_devicepools_lists_devicepools_alone(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    """Changed by issue 38: `get devicepools` listed the BrowserPools too, as `get` does."""
    temporal(browser("b"), device("d"))
    code, out, err = cli(capsys, "get", "devicepools", "-o", "json")
    assert code == EXIT_OK, err
    assert [p["kind"] for p in json.loads(out)] == ["DevicePool"]


def test_get_shows_a_browser_pool_in_the_version_asked_for(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    """Changed by issue 38: `--api-version` was ignored for a BrowserPool (always v1beta1)."""
    pool = browser("b")
    pool.answers["spec"]["spec"]["proxy"] = {"poolRef": "eu", "sessionTTL": "15m"}
    temporal(pool)
    code, out, err = cli(capsys, "get", "browserpool/b", "-o", "json", "--api-version", "v1alpha1")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert shown["apiVersion"] == "mobile.example.com/v1alpha1"
    assert shown["spec"]["proxy"] == {"poolRef": "eu", "stickyTTL": 900}


async def test_the_browser_pool_client_is_the_one_client_named_for_browser_pools(
    temporal: Any,
) -> None:
    from devicepool.client import PoolClient, PoolSummary
    from devicepool.client.browser_pools import BrowserPoolClient, BrowserPoolSummary

    fake = temporal(browser("b"), device("b"))
    pools = PoolClient(fake)
    browsers = pools.browser_pool_client()
    assert isinstance(browsers, BrowserPoolClient) and isinstance(browsers, PoolClient)
    assert BrowserPoolSummary is PoolSummary
    # A name means the client's own kind unless told.
    assert (await browsers.summary("b")).kind == "BrowserPool"
    assert (await pools.summary("b")).kind == "DevicePool"
    assert (await pools.summary("b", kind="BrowserPool")).status["readyProfiles"] == 2
    assert await browsers.profiles("b") == [{"id": "p-1", "slot": 0, "node": "n1", "open": True}]
    accepted = await browsers.scale("b", 3)
    assert accepted.replicas == 3 and fake.pools["browserpool/b"].updates
    assert not fake.pools["devicepool/b"].updates
