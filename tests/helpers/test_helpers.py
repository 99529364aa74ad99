"""`devicepool.testing` does what the tests and benches lean on it for (no server: milliseconds)."""

from __future__ import annotations

import itertools

import pytest

from devicepool.api import load_manifests_text, parse_pool
from devicepool.testing import (
    BASE_SPEC,
    eventually,
    free_ports,
    pool_manifest,
    pool_yaml,
    wait_until,
)


async def test_eventually_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, "", "ready"])

    async def check() -> str | int | None:
        return next(answers)

    assert await eventually(check, timeout=5, every=0.01) == "ready"


async def test_eventually_fails_with_what_and_the_last_answer() -> None:
    async def check() -> int:
        return 0

    with pytest.raises(
        AssertionError, match=r"^timed out after 0.2s waiting for the pool \(last: 0\)$"
    ):
        await eventually(check, timeout=0.2, what="the pool", every=0.05)


async def test_eventually_retries_only_the_errors_it_is_told_to() -> None:
    calls = itertools.count()

    async def flaky() -> bool:
        if next(calls) < 2:
            raise OSError("not yet")
        return True

    assert await eventually(flaky, timeout=5, every=0.01, retry_on=(OSError,)) is True

    async def broken() -> bool:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        await eventually(broken, timeout=5, every=0.01, retry_on=(OSError,))

    async def never() -> bool:
        raise OSError("down")

    with pytest.raises(AssertionError, match=r"last: OSError\('down'\)"):
        await eventually(never, timeout=0.1, every=0.02, retry_on=(OSError,))


def test_wait_until_is_the_same_loop_for_synchronous_code() -> None:
    answers = iter([False, True])
    assert wait_until(lambda: next(answers), timeout=5, what="x", every=0.01) is True
    with pytest.raises(
        AssertionError, match=r"^timed out after 0.1s waiting for y \(last: None\)$"
    ):
        wait_until(lambda: None, timeout=0.1, what="y", every=0.02)


def test_pool_manifest_overrides_drops_and_never_shares_the_base() -> None:
    manifest = pool_manifest("p", replicas=3, proxy=None, providerCredentialRef="second")
    assert manifest["metadata"] == {"name": "p"}
    assert manifest["spec"] == {
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 3,
        "providerCredentialRef": "second",
    }
    pool_manifest("q")["spec"]["proxy"]["poolRef"] = "changed"
    assert BASE_SPEC["proxy"] == {"poolRef": "proxyseller-us", "stickyTTL": 900}
    assert parse_pool(pool_manifest("q")).spec.proxy is not None


def test_pool_yaml_is_what_the_loader_reads_as_the_same_pool() -> None:
    (pool,) = load_manifests_text(pool_yaml("y", replicas=2, region="eu-west"))
    assert pool == parse_pool(pool_manifest("y", replicas=2, region="eu-west"))
    assert (pool.name, pool.spec.replicas, pool.spec.region) == ("y", 2, "eu-west")


def test_free_ports_are_distinct() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert all(1024 <= p <= 65535 for p in ports)


def test_a_cancel_for_an_activity_that_just_ended_does_not_stop_the_sessions_worker() -> None:
    # The SDK warns when the server cancels an activity the worker finished a
    # moment before (a pool cancelled while its late listing completed), inside
    # its activity poll loop. Under `filterwarnings = error` that warning was an
    # exception there: "Activity worker failed", the session's shared worker
    # shut down, and every later test of its group failed (seen in a
    # --count 20 loop of tests/workflows/test_pool_continue_as_new.py).
    from types import SimpleNamespace

    from temporalio.worker._activity import _ActivityWorker

    worker = SimpleNamespace(_running_activities={})
    _ActivityWorker._handle_cancel_activity_task(worker, b"ended", None)  # type: ignore[arg-type]


async def test_a_dev_server_whose_port_was_taken_is_started_again_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CI lost a run to this: the SDK frees the port it picked, another process binds
    # it, and the server fails "address already in use" and never answers.
    from temporalio.testing import WorkflowEnvironment

    from devicepool import testing

    calls: list[dict[str, object]] = []

    async def start_local(**options: object) -> str:
        calls.append(options)
        if len(calls) == 1:
            raise RuntimeError("ephemeral server at 127.0.0.1:42505 did not start within 5s")
        return "env"

    monkeypatch.setattr(WorkflowEnvironment, "start_local", start_local)
    assert await testing.start_dev_server(temporal="temporal") == "env"
    assert len(calls) == 2

    calls.clear()
    with pytest.raises(RuntimeError, match="did not start"):
        await testing.start_dev_server(temporal="temporal", port=7233)
    assert len(calls) == 1, "a port the caller chose is not retried"
