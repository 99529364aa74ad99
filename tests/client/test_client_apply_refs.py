"""`apply` of a DevicePool whose region or proxy pool the worker does not know is refused before
anything starts (issue 43, item 6): the pool existed and had to be deleted by hand. The worker's
own check (`check_pool_refs`) is asked first, as a standalone activity; where it cannot be
asked, the pool checks as before and `--wait`'s stop says how to remove it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities.models import CheckRefsInput, CheckRefsResult, PoolSettings
from devicepool.api.names import TASK_QUEUE, node_phone_task_queue
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME
from devicepool.workflows.pool.messages import Accepted
from tests.helpers.cli import FakeStarts, cli, fake_temporal
from tests.helpers.manifests import alpha_yaml

REGION = "unknown region 'mars-1' (spec.region); known: us-east, us-west"
PROXY = "unknown proxy pool 'nope' (proxy.poolRef); known: proxyseller-us"
# A proxy pool the worker config dropped after a pool started with it.
RESI = "unknown proxy pool 'resi' (proxy.poolRef); known: proxyseller-us"


class Handle:
    def __init__(self, temporal: Temporal, workflow_id: str) -> None:
        self.temporal, self.id = temporal, workflow_id

    async def describe(self) -> Any:
        if self.id.startswith("devicepool/") and self.id not in self.temporal.running:
            raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
        return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)

    async def query(self, name: str, **_: Any) -> Any:
        if name == "spec":
            return self.temporal.specs.get(self.id)
        return (
            self.temporal.statuses.pop(0)
            if len(self.temporal.statuses) > 1
            else (self.temporal.statuses[0])
        )


class Temporal(FakeStarts):
    """Pools by id (`running`), every account's ledger running, and the worker's answers to
    the standalone activities `pool_settings` and `check_pool_refs` (problems by region and
    proxy pool); `standalone=False`: a server without standalone activities."""

    def __init__(
        self,
        *,
        running: tuple[str, ...] = (),
        nodes: dict[str, str] | None = None,
        standalone: bool = True,
    ) -> None:
        super().__init__(running)
        self.nodes = nodes or {}
        self.standalone = standalone
        self.asked: list[tuple[str, Any, str]] = []
        self.updates: list[str] = []
        self.statuses: list[dict[str, Any]] = [{}]
        self.specs: dict[str, Any] = {}  # a running pool's answer to the `spec` query

    async def execute_activity(
        self, defined: Any, arg: Any = None, *, id: str, task_queue: str, **_: Any
    ) -> Any:
        if not self.standalone:
            raise RPCError("Standalone activity is disabled", RPCStatusCode.UNIMPLEMENTED, b"")
        activity = defined.__name__
        self.asked.append((activity, arg, task_queue))
        if activity == "pool_settings":
            return PoolSettings(account_nodes=self.nodes)
        assert isinstance(arg, CheckRefsInput)
        problems = [PROXY] if arg.proxy_pool == "nope" else []
        problems += [RESI] if arg.proxy_pool == "resi" else []
        problems += [REGION] if arg.region == "mars-1" else []
        return CheckRefsResult(problems=problems)

    def handle(self, workflow_id: str) -> Handle:
        return Handle(self, workflow_id)

    async def execute_update_with_start_workflow(self, *_: Any, **kw: Any) -> Any:
        self.updates.append(str(kw.get("id")))
        return Accepted(generation=2, replicas=2, result="configured")


def write(
    tmp_path: Path, name: str = "p", region: str = "us-west", proxy: str = "gw", replicas: int = 2
) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(alpha_yaml(name, region=region, replicas=replicas, proxy={"poolRef": proxy}))
    return str(path)


@pytest.mark.parametrize(
    ("region", "proxy", "said"),
    [
        ("mars-1", "gw", REGION),
        ("us-west", "nope", PROXY),
        ("mars-1", "nope", f"{PROXY}; {REGION}"),
    ],
)
def test_an_unknown_region_or_proxy_pool_is_refused_before_the_pool_starts(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    region: str,
    proxy: str,
    said: str,
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    path = write(tmp_path, region=region, proxy=proxy)
    code, out, err = cli(capsys, "apply", "-f", path, "--wait")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert err == f"error: {path}: pool 'p': {said} — nothing was created\n"
    assert (temporal.started, temporal.updates) == ([], [])
    ((_activity, asked, queue),) = [a for a in temporal.asked if a[0] == "check_pool_refs"]
    assert asked == CheckRefsInput(
        account="default", proxy_pool=proxy, region=region, platform="android"
    )
    assert queue == TASK_QUEUE


def test_a_running_pool_changed_to_an_unknown_proxy_pool_is_refused_unchanged(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    running_on(temporal, proxy="gw")
    path = write(tmp_path, proxy="nope")
    code, out, err = cli(capsys, "apply", "-f", path)
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert err == f"error: {path}: pool 'p': {PROXY} — nothing was changed\n"
    assert (temporal.started, temporal.updates) == ([], [])


def running_on(temporal: Temporal, *, proxy: str, region: str = "us-west") -> None:
    """`devicepool/p` runs with these references (its `spec` query, in v1beta1)."""
    temporal.running.add("devicepool/p")
    spec = {
        "platform": "android",
        "region": region,
        "replicas": 2,
        "provider": {"name": "bitcloudphone", "account": "default"},
        "proxy": {"poolRef": proxy},
    }
    temporal.specs["devicepool/p"] = {"metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize("replicas", [0, 2])
def test_a_running_pool_whose_proxy_pool_the_worker_lost_still_takes_a_change(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    replicas: int,
) -> None:
    """The worker config dropped the proxy pool `p` runs on: the pool only stops creating.
    A manifest that keeps that reference (a scale-down, any other edit) changes no reference,
    so it goes through: the one declarative way to stop the billing is not shut."""
    temporal = fake_temporal(monkeypatch, Temporal())
    running_on(temporal, proxy="resi")
    code, out, err = cli(capsys, "apply", "-f", write(tmp_path, proxy="resi", replicas=replicas))
    assert (code, err) == (EXIT_OK, ""), err
    assert out.startswith("devicepool/p configured")
    assert len(temporal.updates) == 1


def test_a_running_pool_is_refused_only_for_the_reference_the_manifest_changes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    running_on(temporal, proxy="resi")
    path = write(tmp_path, proxy="resi", region="mars-1")
    code, out, err = cli(capsys, "apply", "-f", path)
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert err == f"error: {path}: pool 'p': {REGION} — nothing was changed\n"
    assert temporal.updates == []


def test_many_pools_ask_once_each_and_only_the_bad_one_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal())
    for name in ("a", "b", "c"):
        write(tmp_path, name=name)
    write(tmp_path, name="d", region="mars-1")
    code, out, err = cli(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_BAD_INPUT
    assert out.splitlines() == [
        f"devicepool/{name} created (generation 1, replicas 2)" for name in ("a", "b", "c")
    ]
    assert err.splitlines()[0] == (
        f"error: {tmp_path / 'd.yaml'}: pool 'd': {REGION} — nothing was created"
    )
    assert sorted(temporal.started) == ["devicepool/a", "devicepool/b", "devicepool/c"]
    checks = [a for a in temporal.asked if a[0] == "check_pool_refs"]
    assert len(checks) == 2  # one a distinct account, proxy pool, region and platform
    assert [a[0] for a in temporal.asked].count("pool_settings") == 1


def test_an_account_a_node_worker_serves_is_checked_on_that_node(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = fake_temporal(monkeypatch, Temporal(nodes={"default": "node-1"}))
    code, _, err = cli(capsys, "apply", "-f", write(tmp_path, region="mars-1"))
    assert code == EXIT_BAD_INPUT, err
    queues = {queue for activity, _, queue in temporal.asked if activity == "check_pool_refs"}
    assert queues == {node_phone_task_queue("node-1")}


def test_without_standalone_activities_the_pool_checks_and_the_wait_says_how_to_remove_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)
    temporal = fake_temporal(monkeypatch, Temporal(standalone=False))
    message = f"{REGION} — provisioning stopped"
    temporal.statuses = [
        {
            "observedGeneration": 1,
            "desiredReplicas": 2,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "UnknownRegion", "message": message}
            ],
        }
    ]
    code, out, err = cli(capsys, "apply", "-f", write(tmp_path, region="mars-1"), "--wait")
    assert code == EXIT_RUNTIME
    assert out == "devicepool/p created (generation 1, replicas 2)\n"
    assert err == (
        f'error: pool "p" cannot become ready: UnknownRegion: {message}; fix the manifest or '
        "the worker config and apply again, or remove the pool: devicepool delete p\n"
    )
    assert temporal.started == ["devicepool/p"]


def test_a_worker_that_does_not_answer_leaves_the_check_to_the_pool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from temporalio.client import ActivityFailureError

    temporal = fake_temporal(monkeypatch, Temporal())

    async def times_out(*_: Any, **__: Any) -> Any:
        raise ActivityFailureError(cause=TimeoutError("ScheduleToStart"))

    temporal.execute_activity = times_out  # type: ignore[method-assign]
    code, _out, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, "")
    assert temporal.started == ["devicepool/p"]


def test_a_worker_that_does_not_serve_the_account_leaves_the_check_to_the_pool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker whose `pool_settings` does not name the node that serves the account (an
    older build) answers for the wrong worker: its word is not taken for the pool's."""
    temporal = fake_temporal(monkeypatch, Temporal())
    ask = temporal.execute_activity

    async def misplaced(defined: Any, *args: Any, **kw: Any) -> Any:
        if defined.__name__ == "check_pool_refs":
            return CheckRefsResult(
                problems=[
                    "account 'default' (providerCredentialRef) is served by node worker "
                    "'node-1', not by this worker: its calls belong on that node's queue"
                ]
            )
        return await ask(defined, *args, **kw)

    temporal.execute_activity = misplaced  # type: ignore[method-assign]
    code, _, err = cli(capsys, "apply", "-f", write(tmp_path))
    assert (code, err) == (EXIT_OK, "")
    assert temporal.started == ["devicepool/p"]
