"""`--wait` of either kind against the in-process Temporal of `test_client_both_kinds`:
what a wait says when its pool ends, or no worker answers, and what it asks the pool.

Each line and exit code is what the CLI printed before the kind registry (issue 38).
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from devicepool.client.errors import EXIT_OK, EXIT_RUNTIME, BadInput
from tests.client.test_client_both_kinds import Pool, browser, device, temporal
from tests.helpers.cli import cli as run

__all__ = ["temporal"]  # the fixture, used by name

# What each kind's status says once its teardown finished: nothing desired, nothing left.
TORN_DOWN = {
    "browserpool": {
        "phase": "Deleting",
        "observedGeneration": 3,
        "desiredReplicas": 0,
        "readyProfiles": 0,
        "profileIds": [],
    },
    "devicepool": {
        "phase": "Deleting",
        "observedGeneration": 3,
        "desiredReplicas": 0,
        "readyDevices": 0,
    },
}


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wait here polls its pool each 10 ms (its timeouts are a second or less)."""
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)


def pool_named(named: str) -> tuple[str, Pool]:
    """(kind, pool `b` of that kind) for `named`, `<kind>/b`."""
    kind = named.split("/")[0]
    return kind, browser("b") if kind == "browserpool" else device("b")


class DeletedAfterScale(Pool):
    """Runs until its scale update is answered; then deleted: its run CANCELED, its
    torn-down status still answered (a worker replays the closed run to answer)."""

    ended = False

    async def describe(self) -> Any:
        desc = await super().describe()
        if self.ended:
            desc.status = WorkflowExecutionStatus.CANCELED
        return desc

    async def execute_update(self, name: str, request: Any = None, **kw: Any) -> Any:
        answer = await super().execute_update(name, request, **kw)
        self.ended = True
        self.answers["status"] = TORN_DOWN[self.id.split("/")[0]]
        return answer


@pytest.mark.parametrize(
    ("named", "line"),
    [
        ("browserpool/b", "error: browserpool/b not found (no running workflow browserpool/b)"),
        ("devicepool/b", 'error: pool "b" not found (no running workflow devicepool/b)'),
    ],
)
def test_scale_wait_on_a_pool_deleted_meanwhile_is_not_found_not_ready(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str, line: str
) -> None:
    kind, made = pool_named(named)
    pool = DeletedAfterScale(made.id, made.answers)
    temporal(pool)
    code, out, err = run(capsys, "scale", named, "--replicas", "3", "--wait", "--timeout", "1")
    assert out == f"{kind}/b scaled to 3 (generation 2)\n"
    assert (code, err.splitlines()[-1]) == (EXIT_RUNTIME, line)
    assert "ready" not in out


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("pause_remediation", ("x",)),
        ("resume_remediation", ("x",)),
        ("replace_device", ("x", "d-1")),
        ("protect_device", ("x", "d-1")),
        ("unprotect_device", ("x", "d-1")),
        ("devices", ("x",)),
        ("costs", ("x",)),
        ("costs", ()),
    ],
)
async def test_a_devicepool_control_of_the_browser_pool_client_is_refused_unsent(
    temporal: Any, method: str, args: tuple[str, ...]
) -> None:
    """`BrowserPoolClient` had no DevicePool controls (AttributeError); inherited, they
    reached the DevicePool of the same name (`replace_device` rented a phone)."""
    from devicepool.client.browser_pools import BrowserPoolClient

    fake = temporal(device("x"), browser("x"))
    with pytest.raises(BadInput, match=f"BrowserPools have no {method}"):
        await getattr(BrowserPoolClient(fake), method)(*args)
    assert not any(p.updates or p.queries for p in fake.pools.values())


@pytest.mark.parametrize("kind", ["browserpool", "NodePool"])
@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("summary", ("x",)),
        ("get", ("x",)),
        ("scale", ("x", 3)),
        ("delete", ("x",)),
        ("describe", ("x",)),
        ("list_pools", ()),
        ("running", ("x",)),
    ],
)
async def test_a_kind_the_client_does_not_know_is_bad_input_unsent(
    temporal: Any, kind: str, method: str, args: tuple[Any, ...]
) -> None:
    """`kind=` is a manifest kind (`BrowserPool`); the CLI's word, or none, was a KeyError."""
    from devicepool.client import PoolClient

    fake = temporal(device("x"), browser("x"))
    with pytest.raises(BadInput, match=f"kind={kind!r}: not a pool kind"):
        await getattr(PoolClient(fake), method)(*args, kind=kind)
    assert not any(p.updates or p.queries or p.cancelled for p in fake.pools.values())


@pytest.mark.parametrize(
    ("named", "line"),
    [
        # A BrowserPool's wait said at once that no worker answers...
        (
            "browserpool/b",
            'error: pool "b": no worker did answer in time — is `devicepool worker` '
            "(or `devicepool dev`) running?",
        ),
        # ...a DevicePool's waits its timeout out (a worker may come).
        ("devicepool/b", 'error: pool "b" not ready after 0.2s (0/? ready, phase unknown)'),
    ],
)
def test_scale_wait_with_no_worker_answering(
    capsys: pytest.CaptureFixture[str], temporal: Any, named: str, line: str
) -> None:
    kind, made = pool_named(named)
    del made.answers["status"]  # no worker answers it
    temporal(made)
    code, out, err = run(capsys, "scale", named, "--replicas", "3", "--wait", "--timeout", "0.2")
    assert out == f"{kind}/b scaled to 3 (generation 2)\n"
    assert (code, err.splitlines()[-1]) == (EXIT_RUNTIME, line)
    assert made.queries.count("status") == (1 if kind == "browserpool" else len(made.queries))


class EndsWhenCancelled(Pool):
    """Its teardown ends its run as soon as it is cancelled."""

    async def describe(self) -> Any:
        desc = await super().describe()
        if self.cancelled:
            desc.status = WorkflowExecutionStatus.CANCELED
        return desc


def test_delete_wait_of_a_browser_pool_asks_it_nothing(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    """A BrowserPool has no block shown before to give a grace, nor retired profiles to
    count: each query (up to 5 s with no worker, a replay of a closed run with one)
    meant nothing for it."""
    made = browser("b")
    pool = EndsWhenCancelled(made.id, made.answers)
    temporal(pool)
    code, out, err = run(capsys, "delete", "browserpool/b", "--wait", "--timeout", "1")
    assert (code, out) == (
        EXIT_OK,
        "browserpool/b deleted (every profile closed and deleted)\n",
    ), err
    assert pool.cancelled and pool.queries == []


def test_delete_wait_of_a_devicepool_still_counts_retired_profiles(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    made = device("d")
    made.answers["status"] = {**made.answers["status"], "profilesRetired": 2}
    pool = EndsWhenCancelled(made.id, made.answers)
    temporal(pool)
    code, out, err = run(capsys, "delete", "devicepool/d", "--wait", "--timeout", "1")
    assert code == EXIT_OK, err
    assert out.splitlines() == [
        "devicepool/d deleted (0 devices left)",
        "2 cloud-phone profile(s) kept, powered off and marked retired: the BitBrowser "
        "Local API has no delete",
    ]
    assert pool.queries == ["status", "status"]  # a block shown before; the closed run's count
