"""`PoolClient` against live pools: what `apply` answers, and waits that stop on what cannot heal."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.api import parse_pool
from devicepool.api.names import pool_workflow_id
from devicepool.api.v1beta1 import DevicePool
from devicepool.client import PoolBlocked, PoolClient
from devicepool.client._refs_check import RefsCheck
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, BadInput
from devicepool.testing import eventually, pool_manifest, write_pool
from devicepool.workflows.pool.messages import ApplyResult
from tests.helpers.servers import temporal_binary
from tests.helpers.transports import TimedASGITransport
from tests.helpers.workflow_stack import pool_devices

pytestmark = pytest.mark.devserver


def manifest(name: str, **spec: Any) -> DevicePool:
    return parse_pool(pool_manifest(name, **spec))


async def test_apply_says_created_configured_or_unchanged(
    pools: PoolClient, pool_name: str
) -> None:
    pool = manifest(pool_name)
    answers = [await pools.apply(pool), await pools.apply(pool)]
    changed = manifest(pool_name, osVersion="15")
    answers += [await pools.apply(changed), await pools.apply(changed)]
    labelled = changed.model_copy(deep=True)
    labelled.metadata.labels = {"team": "growth"}
    answers.append(await pools.apply(labelled))
    assert [(a.result, a.generation) for a in answers] == [
        (ApplyResult.CREATED, 1),
        (ApplyResult.UNCHANGED, 1),  # was "created" again: the word came from generation 1
        (ApplyResult.CONFIGURED, 2),
        (ApplyResult.UNCHANGED, 2),
        (ApplyResult.CONFIGURED, 2),  # metadata is no spec: no new generation
    ]
    await pools.delete(pool_name, wait=True, timeout=60)


async def test_apply_refuses_an_unknown_proxy_pool_before_the_pool_starts(
    pools: PoolClient, pool_name: str
) -> None:
    # Issue 43, item 6: the pool started, stuck at Ready=False, and had to be deleted by
    # hand. The worker's own check is asked first (a standalone activity).
    with pytest.raises(BadInput) as refused:
        await pools.apply(manifest(pool_name, replicas=2, proxy={"poolRef": "nope"}))
    assert str(refused.value) == (
        f"pool {pool_name!r}: unknown proxy pool 'nope' (proxy.poolRef); known: "
        "proxyseller-us — nothing was created"
    )
    assert not await pools.running(pool_name)


async def test_wait_ready_stops_at_once_on_an_unknown_proxy_pool(
    pools: PoolClient, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the worker cannot be asked first (a server without standalone activities), the
    # pool is accepted, then stuck at 0/2 with Ready=False UnknownProxyPool: `--wait` used to
    # run out its timeout.
    async def not_asked(*_: Any) -> None:
        return None

    monkeypatch.setattr(RefsCheck, "_run", not_asked)
    accepted = await pools.apply(manifest(pool_name, replicas=2, proxy={"poolRef": "nope"}))
    started = time.monotonic()
    with pytest.raises(PoolBlocked) as blocked:
        await pools.wait_ready(pool_name, generation=accepted.generation, timeout=60)
    assert time.monotonic() - started < 20
    assert blocked.value.exit_code == EXIT_RUNTIME
    assert blocked.value.reason == "UnknownProxyPool"
    assert str(blocked.value) == (
        f'pool "{pool_name}" cannot become ready: UnknownProxyPool: unknown proxy pool '
        "'nope' (proxy.poolRef); known: proxyseller-us — provisioning stopped; fix the "
        "manifest or the worker config and apply again, or remove the pool: devicepool "
        f"delete {pool_name}"
    )
    await pools.delete(pool_name, wait=True, timeout=60)


# ---------------------------------------------------------------- the CLI, against live pools


def manifest_file(tmp_path: Path, name: str, **spec: str | int) -> str:
    """A manifest file of its own (a new name each call) for the pool, with no proxy."""
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yaml"
    fields: dict[str, Any] = {"proxy": None, "providerCredentialRef": "default", **spec}
    return str(write_pool(path, name, **fields))


async def applied(cli: Any, manifest: str) -> None:
    """`apply -f MANIFEST --wait`, which must succeed (the pool ready)."""
    code, _, err = await cli("apply", "-f", manifest, "--wait")
    assert code == 0, err


async def test_a_refused_change_is_exit_2_names_the_field_and_changes_nothing(
    cli: Any, env: WorkflowEnvironment, pools: PoolClient, pool_name: str, tmp_path: Path
) -> None:
    # README: "Platform, region, provider and account cannot change on a running
    # pool"; exit 2 for "a change the pool refuses", and bad input changes nothing.
    code, out, err = await cli("apply", "-f", manifest_file(tmp_path, pool_name))
    assert code == 0, err
    handle = env.client.get_workflow_handle(pool_workflow_id(pool_name))
    # The manifest is the article's v1alpha1; the pool (and its message) is v1beta1.
    for field, value, path in (
        ("platform", "ios", "platform"),
        ("region", "eu-west", "region"),
        ("providerCredentialRef", "second", "provider.account"),
    ):
        changed = manifest_file(tmp_path, pool_name, replicas=1, **{field: value})
        code, out, err = await cli("apply", "-f", changed)
        assert code == EXIT_BAD_INPUT, (field, out, err)
        # One line of the CLI's own (stderr here also carries what the
        # session's in-process workers log meanwhile).
        (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
        assert f"spec.{path}: cannot change" in line, line
        live = await handle.query("spec")
        assert live["generation"] == 1, live
        kept = live["spec"]
        for key in path.split("."):
            kept = kept[key]
        assert kept != value and live["spec"]["replicas"] == 0, live
    await pools.delete(pool_name, wait=True, timeout=60)


async def test_wait_timeout_expires_with_exit_1_and_says_how_far_it_got(
    cli: Any, pools: PoolClient, control: Any, pool_name: str, tmp_path: Path
) -> None:
    # Every boot stalls: the pool cannot become ready, and nothing tells `--wait`
    # to stop early (no configuration error), so only `--timeout` ends it.
    await control.post("/_emulator/faults", json={"provisionStallRate": 1})
    try:
        started = time.monotonic()
        code, out, err = await cli(
            "apply",
            "-f",
            manifest_file(tmp_path, pool_name, replicas=2),
            "--wait",
            "--timeout",
            "2",
        )
        took = time.monotonic() - started
    finally:
        await control.post("/_emulator/faults", json={})
    assert code == EXIT_RUNTIME, (out, err)
    assert 2 <= took < 15, took
    said = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and f'pool "{pool_name}" not ready after 2s' in said[0], err
    await pools.delete(pool_name, wait=True, timeout=60)


async def test_get_shows_phase_deleting_while_the_teardown_runs(
    cli: Any, pools: PoolClient, control: Any, pool_name: str, tmp_path: Path
) -> None:
    # README: the finalizer "shows phase `Deleting` meanwhile, then ends". The
    # provider's DELETEs are held, so the teardown is certainly still running.
    await applied(cli, manifest_file(tmp_path, pool_name, replicas=1))
    TimedASGITransport.delete_gate = asyncio.Event()
    code, _, err = await cli("delete", pool_name)
    assert code == 0, err

    async def deleting() -> dict[str, Any] | None:
        code, out, _ = await cli("get", pool_name, "-o", "json")
        shown = json.loads(out) if code == 0 else None
        return shown if shown and "Deleting" in json.dumps(shown) else None

    shown = await eventually(deleting, what="get showing phase Deleting", timeout=15)
    assert (await pools.get(pool_name))["phase"] == "Deleting", shown
    TimedASGITransport.delete_gate.set()
    await pools.delete(pool_name, wait=True, timeout=60)


async def test_the_stock_temporal_cli_queries_status_as_the_readme_shows(
    env: WorkflowEnvironment, pools: PoolClient, pool_name: str
) -> None:
    # README: `temporal workflow query --workflow-id devicepool/NAME --type status`.
    await pools.apply(manifest(pool_name, replicas=0))
    address = env.client.service_client.config.target_host
    argv = [temporal_binary(), "workflow", "query", "--address", address]
    argv += ["--workflow-id", f"devicepool/{pool_name}", "--type", "status", "-o", "json"]

    async def queried() -> dict[str, Any] | None:
        done = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        (status,) = json.loads(done.stdout)["queryResult"]
        # Answered before the pool's first pass (a loaded machine): ask again.
        return status if status["observedGeneration"] >= 1 else None

    status = await eventually(queried, what="a status after the first pass", timeout=30)
    assert status["desiredReplicas"] == 0, status
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "ProviderAvailable"}, status
    await pools.delete(pool_name, wait=True, timeout=60)


async def test_describe_and_devices_against_a_live_pool(
    cli: Any, pools: PoolClient, control: Any, pool_name: str, tmp_path: Path
) -> None:
    # README: `describe` shows spec, status, conditions, devices and recent
    # events; `devices` the pool's devices. Checked against the provider's truth.
    await applied(cli, manifest_file(tmp_path, pool_name, replicas=2))
    truth = sorted(d["id"] for d in await pool_devices(control, pool_name))
    assert len(truth) == 2

    code, out, err = await cli("devices", pool_name, "-o", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert sorted(d["id"] for d in listed) == truth
    assert {d["status"] for d in listed} == {"ready"}

    code, out, err = await cli("describe", pool_name, "-o", "json")
    assert code == 0, err
    described = json.dumps(json.loads(out))
    assert all(device_id in described for device_id in truth), described
    for word in ('"replicas": 2', '"Ready"', '"readyDevices": 2', "Created"):
        assert word in described, (word, described)
    # The table a person reads names the same devices and the Ready condition.
    code, out, err = await cli("describe", pool_name, "-o", "table")
    assert code == 0, err
    assert all(device_id in out for device_id in truth) and "Ready" in out, out
    await pools.delete(pool_name, wait=True, timeout=60)
