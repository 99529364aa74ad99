"""Leases end to end on the session's stack: the CLI and `PoolClient` against a live
DevicePool (docs/leases.md), on one pool of one device (a pool started is seconds). The
protocol's corners (give-up, cancel, renewals, every exit
code) against a pure pool: tests/client/test_leases_client.py, test_leases_cli.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from devicepool.api import parse_pool
from devicepool.client import PoolClient, _lease_wait
from devicepool.client.errors import EXIT_NOT_GRANTED, EXIT_OK, EXIT_REFUSED
from devicepool.testing import eventually, pool_manifest
from tests.helpers.workflow_stack import POLL

pytestmark = pytest.mark.devserver


async def ready(pools: PoolClient, name: str) -> None:
    """A pool of one device, ready to lease."""
    accepted = await pools.apply(parse_pool(pool_manifest(name, replicas=1)))
    await pools.wait_ready(name, generation=accepted.generation, timeout=60)


def error_line(err: str) -> str:
    """The CLI's own line (stderr here also carries what the session's workers log)."""
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    return line


async def test_lease_renew_release_a_queued_lease_and_the_context_manager(
    cli: Any,
    env: WorkflowEnvironment,
    pools: PoolClient,
    pool_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A ticket polled (a query) 5 times a second.
    monkeypatch.setattr(_lease_wait, "POLL_SECONDS", 0.2)
    await ready(pools, pool_name)
    code, out, err = await cli("lease", pool_name, "--for", "10m", "--holder", "ci-1", "-o", "json")
    assert code == EXIT_OK, err
    first = json.loads(out)
    assert list(first) == ["lease", "pool", "device", "holder", "expiresAt", "connect"]
    assert (first["pool"], first["holder"]) == (pool_name, "ci-1")
    assert first["connect"] == {"ref": f"devicepool connect {pool_name} {first['lease']}"}

    # Refused (3): no device of the pool is ever in eu-west. Not granted (4): none is free.
    code, _, err = await cli("lease", pool_name, "-l", "region=eu-west", "--wait", "1m")
    assert code == EXIT_REFUSED
    assert error_line(err).startswith(f'error: pool "{pool_name}": selector region=eu-west')
    code, _, err = await cli("lease", pool_name, "--holder", "ci-2")
    assert (code, error_line(err)) == (
        EXIT_NOT_GRANTED,
        f'error: pool "{pool_name}": no ready device matching the selector is free',
    )

    # A waiter in the queue, by the Python API: granted the device once it is released.
    queued = asyncio.ensure_future(
        pools.acquire_lease(pool_name, wait=timedelta(seconds=30), holder="ci-3")
    )

    async def ticket_waits() -> bool:
        return bool((await pools.leases(pool_name)).tickets)

    await eventually(ticket_waits, what="a ticket in the queue", every=POLL)
    code, out, _ = await cli("leases", pool_name, "-o", "json")
    shown = json.loads(out)
    assert [(x["id"], x["device"], x["holder"]) for x in shown["leases"]] == [
        (first["lease"], first["device"], "ci-1")
    ]
    assert [t["holder"] for t in shown["tickets"]] == ["ci-3"]

    code, out, err = await cli("renew", pool_name, first["lease"], "--for", "5m")
    assert code == EXIT_OK, err
    assert out.startswith(f"devicepool/{pool_name}: lease {first['lease']} on {first['device']}")
    code, out, err = await cli("release", pool_name, first["lease"])
    assert code == EXIT_OK, err
    second = await asyncio.wait_for(queued, 30)
    assert (second.device, second.holder) == (first["device"], "ci-3")
    assert second.waited_seconds > 0

    # Released again: no error (idempotent). Renewed again: gone (3).
    code, out, _ = await cli("release", pool_name, first["lease"])
    assert code == EXIT_OK and "had ended already" in out
    code, _, err = await cli("renew", pool_name, first["lease"])
    assert code == EXIT_REFUSED and "Released" in error_line(err)

    # A wait that runs out: exit 4, and its ticket is gone from the queue at once.
    code, _, err = await cli("lease", pool_name, "--wait", "300ms")
    assert (code, error_line(err)) == (
        EXIT_NOT_GRANTED,
        f'error: pool "{pool_name}": no ready device matching the selector came free',
    )
    view = await pools.leases(pool_name)
    assert ([x.id for x in view.leases], view.tickets) == ([second.id], [])
    await pools.release_lease(pool_name, second)

    # The context manager releases on the way out, an exception's too.
    with pytest.raises(RuntimeError, match="the automation failed"):
        async with pools.lease(pool_name, duration=timedelta(minutes=10)) as lease:
            held = (await pools.leases(pool_name)).leases
            assert [(x.id, x.device) for x in held] == [(lease.id, lease.device)]
            assert (await pools.get(pool_name))["leasedDevices"] == 1
            raise RuntimeError("the automation failed")
    assert (await pools.leases(pool_name)).leases == []
    assert (await pools.get(pool_name))["leasedDevices"] == 0
    handle = env.client.get_workflow_handle(f"devicepool/{pool_name}")
    said = [e["reason"] for e in (await handle.query("events"))["events"]]
    assert [r for r in said if r.startswith("Lease")][-2:] == ["Leased", "LeaseReleased"]
    await pools.delete(pool_name, wait=True, timeout=60)
