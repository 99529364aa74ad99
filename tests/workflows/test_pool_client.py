"""`PoolClient` against live pools: what `apply` answers, and waits that stop on what cannot heal."""

from __future__ import annotations

import time
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from wf_support import Workers

from devicepool.api.v1alpha1 import DevicePool
from devicepool.client import PoolBlocked, PoolClient
from devicepool.client.errors import EXIT_RUNTIME
from devicepool.workflows.messages import ApplyResult

pytestmark = pytest.mark.devserver


@pytest.fixture
def pools(
    env: WorkflowEnvironment, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> PoolClient:
    # The session's workers serve both accounts but never registered their
    # ledgers: doing it here would reconfigure the creation windows the other
    # tests run under. tests/ratelimit covers `apply`'s account check.
    async def served(self: PoolClient, account: str) -> None:
        return None

    monkeypatch.setattr(PoolClient, "_check_account", served)
    return PoolClient(env.client)


def manifest(name: str, **spec: Any) -> DevicePool:
    return DevicePool.model_validate(
        {
            "apiVersion": "mobile.example.com/v1alpha1",
            "kind": "DevicePool",
            "metadata": {"name": name},
            "spec": {
                "platform": "android",
                "region": "us-west",
                "osVersion": "14",
                "replicas": 0,
                "proxy": {"poolRef": "proxyseller-us", "stickyTTL": 900},
                **spec,
            },
        }
    )


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


async def test_wait_ready_stops_at_once_on_an_unknown_proxy_pool(
    pools: PoolClient, pool_name: str
) -> None:
    # Accepted (the worker, not the client, knows its proxy pools), then stuck
    # at 0/2 with Ready=False UnknownProxyPool: `--wait` used to run out its timeout.
    accepted = await pools.apply(manifest(pool_name, replicas=2, proxy={"poolRef": "nope"}))
    started = time.monotonic()
    with pytest.raises(PoolBlocked) as blocked:
        await pools.wait_ready(pool_name, generation=accepted.generation, timeout=60)
    assert time.monotonic() - started < 20
    assert blocked.value.exit_code == EXIT_RUNTIME
    assert blocked.value.reason == "UnknownProxyPool"
    assert str(blocked.value) == (
        f'pool "{pool_name}" cannot become ready: UnknownProxyPool: unknown proxy pool '
        "'nope' (proxy.poolRef); known: proxyseller-us — provisioning stopped"
    )
    await pools.delete(pool_name, wait=True, timeout=60)
