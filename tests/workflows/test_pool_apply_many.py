"""`devicepool apply -f DIR/` against the session's dev server and worker: many pools at once.

The real CLI (in a thread, as tests/workflows/test_pool_client.py runs it) applies
a directory of pools with several in flight (more pools than in-flight slots, so
some wait for a slot); Temporal's own list of executions says each pool was
started exactly once. The pools have no devices, so the test measures nothing
but the apply.
"""

from __future__ import annotations

import asyncio
import collections
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from devicepool.api.names import WORKFLOW_DEVICE_POOL, pool_workflow_id
from devicepool.client import PoolClient
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK
from devicepool.testing import eventually, write_pool
from tests.helpers.cli import CliRun

pytestmark = pytest.mark.devserver

POOLS = 6
CONCURRENCY = "4"


@pytest.fixture
def cli(cli: CliRun) -> Any:
    """`devicepool ARGS` in a thread against the session's dev server: (code, stdout lines,
    the CLI's own stderr lines)."""
    run = cli

    async def lines(*argv: str) -> tuple[int, list[str], list[str]]:
        code, out, err = await run(*argv)
        # stderr also carries what the session's in-process workers log: the CLI's
        # own lines are its errors and its count.
        own = [line for line in err.splitlines() if line.startswith("error: ") or COUNT.match(line)]
        return code, out.splitlines(), own

    return lines


COUNT = re.compile(r"^\d+ pools?: ")


def directory(tmp_path: Path, prefix: str, **changed: dict[str, Any]) -> tuple[Path, list[str]]:
    """`POOLS` manifests `PREFIX-00.yaml`...: no devices, no proxy; `changed` by pool name."""
    folder = tmp_path / prefix
    folder.mkdir(parents=True)
    names = [f"{prefix}-{i:02d}" for i in range(POOLS)]
    for name in names:
        spec: dict[str, Any] = {"replicas": 0, "proxy": None, **changed.get(name, {})}
        write_pool(folder / f"{name}.yaml", name, **spec)
    return folder, names


async def executions(client: Client, prefix: str) -> collections.Counter[str]:
    """Runs of each pool workflow of `prefix`, open or closed, as Temporal lists them."""
    query = f"WorkflowType = '{WORKFLOW_DEVICE_POOL}'"
    return collections.Counter(
        [
            e.id
            async for e in client.list_workflows(query)
            if e.id.startswith(f"devicepool/{prefix}-")
        ]
    )


async def delete_all(pools: PoolClient, names: list[str]) -> None:
    await asyncio.gather(*(pools.delete(name, wait=True, timeout=60) for name in names))


async def test_a_directory_is_applied_at_once_and_every_pool_started_once(
    cli: Any, env: WorkflowEnvironment, pools: PoolClient, tmp_path: Path
) -> None:
    folder, names = directory(tmp_path, "many")
    code, out, err = await cli("apply", "-f", str(folder), "--concurrency", CONCURRENCY)
    assert code == EXIT_OK, err
    # The files' order, whichever pool answered first.
    assert out == [f"devicepool/{n} created (generation 1, replicas 0)" for n in names]
    assert err == [f"{POOLS} pools: {POOLS} created"]
    want = {pool_workflow_id(n): 1 for n in names}

    async def listed() -> bool:
        return dict(await executions(env.client, "many")) == want

    await eventually(listed, timeout=15, what="every pool listed once")

    # Again: the same runs answer, nothing new is started.
    code, out, err = await cli("apply", "-f", str(folder), "--concurrency", CONCURRENCY)
    assert code == EXIT_OK, err
    assert out == [f"devicepool/{n} unchanged (generation 1, replicas 0)" for n in names]
    assert err == [f"{POOLS} pools: {POOLS} unchanged"]
    assert dict(await executions(env.client, "many")) == want
    await delete_all(pools, names)


async def test_a_pool_refusing_its_change_in_the_middle_is_one_line_and_the_rest_apply(
    cli: Any, env: WorkflowEnvironment, pools: PoolClient, tmp_path: Path
) -> None:
    first, names = directory(tmp_path / "before", "mid")
    middle = names[POOLS // 2]
    code, _, err = await cli("apply", "-f", str(first / f"{middle}.yaml"))
    assert code == EXIT_OK, err
    assert err == []  # one pool: no count line
    # The whole directory, in which the running pool's platform changes: refused.
    folder, _ = directory(tmp_path, "mid", **{middle: {"platform": "ios"}})
    code, out, err = await cli("apply", "-f", str(folder), "--concurrency", CONCURRENCY)
    assert code == EXIT_BAD_INPUT, err
    assert out == [
        f"devicepool/{n} created (generation 1, replicas 0)" for n in names if n != middle
    ]
    assert len(err) == 2, err
    assert err[0].startswith(f'error: pool "{middle}" rejected the change: spec.platform'), err
    assert err[1] == f"{POOLS} pools: {POOLS - 1} created, 1 failed"
    live = await env.client.get_workflow_handle(pool_workflow_id(middle)).query("spec")
    assert live["generation"] == 1 and live["spec"]["platform"] == "android", live
    assert dict(await executions(env.client, "mid")) == {pool_workflow_id(n): 1 for n in names}
    await delete_all(pools, names)


async def test_one_bad_manifest_in_the_directory_starts_no_pool(
    cli: Any, env: WorkflowEnvironment, tmp_path: Path
) -> None:
    folder, _ = directory(tmp_path, "bad", **{"bad-04": {"replicas": 900}})
    code, out, err = await cli("apply", "-f", str(folder), "--concurrency", CONCURRENCY)
    assert code == EXIT_BAD_INPUT
    assert out == []
    assert len(err) == 1 and "bad-04.yaml" in err[0] and "spec.replicas" in err[0], err
    assert await executions(env.client, "bad") == collections.Counter()
