"""`devicepool apply -f DIR/`: many pools at once, a bounded number in flight, answers in file order.

The CLI runs against a fake Temporal client whose update-with-start takes a
while and counts how many are in flight, so the bound is measured, not assumed.
Later files answer sooner than earlier ones: the printed order is the files'
all the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import account_from_ledger_id, ledger_workflow_id
from devicepool.api.v1beta1 import DevicePool
from devicepool.client import PoolClient, _cli_pools
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME, BadInput
from devicepool.client.pool_client import APPLY_CONCURRENCY
from devicepool.workflows.pool.messages import Accepted
from tests.helpers.manifests import alpha_yaml


class LedgerHandle:
    def __init__(self, temporal: SlowTemporal, workflow_id: str) -> None:
        self.temporal, self.workflow_id = temporal, workflow_id

    async def describe(self) -> object:
        self.temporal.described.append(self.workflow_id)
        if account_from_ledger_id(self.workflow_id) in self.temporal.accounts:
            return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")


class SlowTemporal:
    """Update-with-start that takes `delay` (less for later pools), counting those in flight."""

    def __init__(
        self,
        *,
        delay: float = 0.2,
        refuse: tuple[str, ...] = (),
        broken: tuple[str, ...] = (),
        accounts: tuple[str, ...] = ("default",),
        slow_once: tuple[str, ...] = (),
        no_worker: bool = False,
        new: bool = False,
    ) -> None:
        self.service_client = SimpleNamespace(config=SimpleNamespace(target_host="fake:7233"))
        self.data_converter = SimpleNamespace(payload_codec=None)  # keys: nothing asked
        self.delay, self.refuse, self.broken, self.accounts = delay, refuse, broken, accounts
        self.in_flight = 0
        self.max_in_flight = 0
        self.started: list[str] = []
        self.described: list[str] = []
        self.slow_once, self.no_worker = slow_once, no_worker
        self.update_ids: dict[str, list[str | None]] = {}
        # `new`: no pool runs yet, so each plain start succeeds (once a pool);
        # otherwise every pool exists and each apply is its update.
        self.new = new
        self.plain_starts: list[str] = []

    async def start_workflow(self, workflow: str, body: Any, *, id: str, **_: object) -> object:
        name = body["metadata"]["name"]
        if not self.new or name in self.plain_starts:
            raise WorkflowAlreadyStartedError(id, workflow)
        self.plain_starts.append(name)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay / 4)  # stored: no worker to wait for
        finally:
            self.in_flight -= 1
        return SimpleNamespace(id=id)

    def get_workflow_handle(self, workflow_id: str, **_: object) -> LedgerHandle:
        return LedgerHandle(self, workflow_id)

    async def list_workflows(self, query: str) -> Any:
        for account in self.accounts:
            yield SimpleNamespace(id=ledger_workflow_id(account))

    async def execute_update_with_start_workflow(
        self, update: str, request: Any, id: str | None = None, **_: object
    ) -> Accepted:
        name = request["metadata"]["name"]  # what PoolClient sends: plain JSON (`wire_spec`)
        sends = self.update_ids.setdefault(name, [])
        sends.append(id)
        if self.no_worker or (name in self.slow_once and len(sends) == 1):
            # The RPC timeout, while the worker is busy (or absent).
            await asyncio.sleep(4 * self.delay)
            raise WorkflowUpdateRPCTimeoutOrCancelledError()
        self.started.append(name)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            # p000 answers last, the last pool first.
            await asyncio.sleep(self.delay * (1 + 1 / (1 + int(name[1:]))))
            if name in self.refuse:
                raise WorkflowUpdateFailedError(
                    ApplicationError("spec.platform: cannot change on a running pool")
                )
            if name in self.broken:
                raise RPCError("the history service is down", RPCStatusCode.INTERNAL, b"")
            return Accepted(generation=2, replicas=2, result="configured")
        finally:
            self.in_flight -= 1


def use(monkeypatch: pytest.MonkeyPatch, temporal: SlowTemporal) -> list[str]:
    """Point the CLI at `temporal`; the list records each time it opened a client."""
    opened: list[str] = []

    async def fake_pools(name: str | None = None) -> PoolClient:
        opened.append("opened")
        return PoolClient(temporal)  # type: ignore[arg-type]

    monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)
    return opened


def manifests(tmp_path: Path, count: int, **accounts: str) -> list[str]:
    """`count` manifest files p000.yaml... (pool name -> account in `accounts`); their names."""
    names = [f"p{i:03d}" for i in range(count)]
    for name in names:
        text = alpha_yaml(name, providerCredentialRef=accounts.get(name, "default"))
        (tmp_path / f"{name}.yaml").write_text(text)
    return names


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def created(name: str) -> str:
    return f"devicepool/{name} created (generation 1, replicas 2)"


def configured(name: str) -> str:
    """What each running pool answers the fake's update: its spec changed."""
    return f"devicepool/{name} configured (generation 2, replicas 2)"


def test_a_directory_is_applied_concurrently_up_to_the_default_bound_in_file_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal()
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 2 * APPLY_CONCURRENCY + 3)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_OK, err
    assert temporal.max_in_flight == APPLY_CONCURRENCY
    assert sorted(temporal.started) == names
    assert out == [configured(n) for n in names]
    # One account, checked once, not once a pool.
    assert temporal.described == [ledger_workflow_id("default")]


def test_new_pools_are_plain_starts_that_wait_for_no_worker(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal(new=True)
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 2 * APPLY_CONCURRENCY + 3)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_OK, err
    assert sorted(temporal.plain_starts) == names
    assert temporal.started == []  # no update: nothing waited for a worker
    assert temporal.max_in_flight == APPLY_CONCURRENCY
    assert out == [created(n) for n in names]
    # Applied again, each runs: its update answers.
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_OK, err
    assert sorted(temporal.started) == names
    assert out == [configured(n) for n in names]


def test_concurrency_flag_sets_the_bound(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal(delay=0.05)
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 12)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path), "--concurrency", "3")
    assert code == EXIT_OK, err
    assert temporal.max_in_flight == 3
    assert out == [configured(n) for n in names]
    code, out, err = run(capsys, "apply", "-f", str(tmp_path), "--concurrency", "0")
    assert code == EXIT_BAD_INPUT
    assert len(err) == 1 and err[0].startswith("error: ") and "--concurrency" in err[0], err


def test_apply_help_explains_the_concurrency_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "apply", "--help")
    assert code == EXIT_OK
    assert "--concurrency" in "\n".join(out)
    assert "at once" in "\n".join(out)


def test_a_bad_manifest_anywhere_applies_nothing_and_contacts_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal()
    opened = use(monkeypatch, temporal)
    manifests(tmp_path, 20)
    bad = alpha_yaml("p010", replicas=900, providerCredentialRef="default")
    (tmp_path / "p010.yaml").write_text(bad)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_BAD_INPUT
    assert out == []
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "p010.yaml" in err[0] and "spec.replicas" in err[0], err
    assert opened == [] and temporal.started == [] and temporal.described == []


def test_refused_pools_are_reported_each_and_the_rest_applied(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal(delay=0.05, refuse=("p003", "p011"))
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 14)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_BAD_INPUT
    assert out == [configured(n) for n in names if n not in ("p003", "p011")]
    assert err == [
        f'error: pool "{n}" rejected the change: spec.platform: cannot change on a running pool'
        for n in ("p003", "p011")
    ] + ["14 pools: 12 configured, 2 failed"]


def test_a_runtime_failure_is_exit_1_and_starts_no_further_pool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal(delay=0.05, broken=("p005",), refuse=("p002",))
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 30)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path), "--concurrency", "4")
    assert code == EXIT_RUNTIME
    # Started in file order; once p005 failed, nothing after those already in flight.
    assert temporal.started == names[: len(temporal.started)]
    assert len(temporal.started) <= 6 + 4
    tried = len(temporal.started)
    assert err == [
        'error: pool "p002" rejected the change: spec.platform: cannot change on a running pool',
        "error: Temporal: the history service is down",
        f"30 pools: {tried - 2} configured, 2 failed, {30 - tried} not sent (stopped after the failure)",
    ]
    assert out == [configured(n) for n in temporal.started if n not in ("p002", "p005")]


def test_a_pool_no_worker_took_in_time_is_sent_again_while_others_are_answered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A worker busy with the pools just started takes a new pool's first task
    # late; the update's RPC times out although nothing is wrong.
    temporal = SlowTemporal(delay=0.05, slow_once=("p004",))
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 12)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path), "--concurrency", "4")
    assert code == EXIT_OK, err
    assert out == [configured(n) for n in names]
    (first, again) = temporal.update_ids["p004"]
    assert first is not None and first == again  # the same update: never applied twice


def test_no_worker_at_all_is_one_error_per_pool_tried_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal(delay=0.02, no_worker=True)
    use(monkeypatch, temporal)
    manifests(tmp_path, 12)
    code, out, err = run(capsys, "apply", "-f", str(tmp_path), "--concurrency", "3")
    assert code == EXIT_RUNTIME
    assert out == []
    assert err == [
        f'error: pool "p{i:03d}": no worker did accept the change in time — is `devicepool '
        "worker` (or `devicepool dev`) running?"
        for i in range(3)
    ] + ["12 pools: 3 failed, 9 not sent (stopped after the failure)"]
    assert all(len(sends) == 1 for sends in temporal.update_ids.values())


async def test_apply_many_answers_in_the_pools_order() -> None:
    temporal = SlowTemporal(delay=0.02, refuse=("p001",))
    client = PoolClient(temporal)  # type: ignore[arg-type]
    pools = [
        DevicePool.model_validate(
            {
                "apiVersion": "mobile.example.com/v1beta1",
                "kind": "DevicePool",
                "metadata": {"name": f"p{i:03d}"},
                "spec": {"platform": "android", "region": "us-west", "replicas": 2},
            }
        )
        for i in range(8)
    ]
    seen: list[str] = []
    answers = await client.apply_many(
        pools, concurrency=5, on_result=lambda pool, answer: seen.append(pool.name)
    )
    assert seen == [p.name for p in pools]
    assert [isinstance(a, Accepted) for a in answers] == [True, False] + [True] * 6
    assert isinstance(answers[1], BadInput)
    assert temporal.max_in_flight == 5


REPO = Path(__file__).resolve().parents[2]


def test_a_directory_passes_its_worker_configs_by_with_a_note(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Was: each worker config reported as a manifest without `apiVersion`, nothing applied
    (issue 43, item 5; `convert -f DIR` passes them by the same way)."""
    temporal = SlowTemporal()
    use(monkeypatch, temporal)
    names = manifests(tmp_path, 2)
    for name in ("devicepool.yaml", "node.yaml"):
        (tmp_path / f"worker-{name}").write_text((REPO / "examples/worker" / name).read_text())
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_OK, err
    assert out == [configured(n) for n in names]
    assert err == [
        f"{tmp_path}/worker-devicepool.yaml: skipped: a worker config, not a manifest",
        f"{tmp_path}/worker-node.yaml: skipped: a worker config, not a manifest",
        "2 pools: 2 configured",
    ]


def test_a_worker_config_named_alone_is_an_error_that_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    temporal = SlowTemporal()
    opened = use(monkeypatch, temporal)
    path = REPO / "examples/worker/node.yaml"
    code, out, err = run(capsys, "apply", "-f", str(path))
    assert (code, out, opened) == (EXIT_BAD_INPUT, [], [])
    assert err == [
        f"error: {path}: a worker config (devicepool worker --config), not a manifest:"
        " nothing to apply"
    ]


def test_a_directory_of_worker_configs_alone_has_nothing_to_apply(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    temporal = SlowTemporal()
    opened = use(monkeypatch, temporal)
    (tmp_path / "node.yaml").write_text((REPO / "examples/worker/node.yaml").read_text())
    code, out, err = run(capsys, "apply", "-f", str(tmp_path))
    assert (code, out, opened) == (EXIT_BAD_INPUT, [], [])
    assert err == [
        f"{tmp_path}/node.yaml: skipped: a worker config, not a manifest",
        f"error: {tmp_path}: no manifests to apply",
    ]
