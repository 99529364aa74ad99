"""Fault injection on the public API, driven by the seeded RNG."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers.emulator import AUTH, Provider, assert_problem


async def test_faults_roundtrip_and_clear(provider: Provider) -> None:
    assert (await provider.http.get("/_emulator/faults")).json() == {
        "rateLimitRate": 0,
        "serverErrorRate": 0,
        "latencyMs": 0,
        "timeoutRate": 0,
        "provisionFailureRate": 0,
        "provisionStallRate": 0,
        "timeoutSeconds": 60,
    }
    body = {
        "rateLimitRate": 0.2,
        "serverErrorRate": 0.1,
        "latencyMs": 100,
        "timeoutRate": 0.05,
        "provisionFailureRate": 0.1,
    }
    answer = (await provider.control("faults", body)).json()
    assert {k: answer[k] for k in body} == body
    assert (await provider.http.get("/_emulator/faults")).json() == answer
    cleared = (await provider.control("faults", {})).json()
    assert cleared["rateLimitRate"] == cleared["latencyMs"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"rateLimitRate": 1.5},
        {"serverErrorRate": -0.1},
        {"latencyMs": -1},
        {"timeoutSeconds": 0},
        {"timeoutRate": "often"},
        {"typoRate": 0.1},
        [0.1],
    ],
)
async def test_faults_are_validated(provider: Provider, body: object) -> None:
    assert_problem(await provider.control("faults", body), 400, "invalid_argument")


async def test_injected_server_errors(provider: Provider) -> None:
    await provider.control("faults", {"serverErrorRate": 1})
    assert_problem(await provider.create(), 500, "server_error")
    assert_problem(await provider.get("/api/v1/devices"), 500, "server_error")
    stats = await provider.stats()
    assert stats["creates"]["rejected"] == 1
    assert stats["devices"]["live"] == 0  # rejected before doing anything


async def test_injected_rate_limits(provider: Provider) -> None:
    await provider.control("faults", {"rateLimitRate": 1})
    limited = await provider.create()
    assert_problem(limited, 429, "rate_limited")
    assert limited.headers["Retry-After"] == "1"
    assert "RateLimit-Limit" in limited.headers
    stats = await provider.stats()
    assert stats["creates"]["rateLimited"] == 1
    assert stats["devices"]["live"] == 0


async def test_fault_rates_follow_the_seed(make_provider) -> None:
    outcomes = []
    for seed in (11, 11, 12):
        provider = await make_provider(seed=seed, creates_per_minute=1000)
        await provider.control("faults", {"rateLimitRate": 0.2, "serverErrorRate": 0.1})
        outcomes.append([(await provider.create()).status_code for _ in range(60)])
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] != outcomes[2]
    assert {202, 429, 500} <= set(outcomes[0])
    assert 5 <= outcomes[0].count(429) <= 25


async def test_provision_failures(provider: Provider) -> None:
    await provider.control("faults", {"provisionFailureRate": 1})
    device = await provider.create_ok()
    assert device["status"] == "provisioning"
    await provider.advance(45)
    status = (await provider.get(f"/api/v1/devices/{device['id']}/status")).json()
    assert (status["status"], status["reason"]) == ("failed", "provision_failed")
    assert (await provider.stats())["devices"]["byStatus"] == {"failed": 1}


async def test_latency(provider: Provider) -> None:
    # A latency far above what an in-process call costs on a busy machine, so the
    # control plane's "not delayed" has half a second of room.
    await provider.control("faults", {"latencyMs": 1000})
    started = time.monotonic()
    response = await provider.get("/api/v1/regions")
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.99
    started = time.monotonic()
    await provider.http.get("/_emulator/stats")
    assert time.monotonic() - started < 0.5


async def test_timed_out_create_was_created(provider: Provider) -> None:
    await provider.control("faults", {"timeoutRate": 1, "timeoutSeconds": 30})
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(provider.create(idempotency_key="lost"), timeout=0.3)
    stats = await provider.stats()
    assert stats["devices"]["live"] == 1
    assert stats["creates"]["accepted"] == 1

    await provider.control("faults", {})
    retry = await provider.create(idempotency_key="lost")
    assert retry.status_code == 202
    assert retry.headers["Idempotent-Replayed"] == "true"
    listed = (await provider.get("/api/v1/devices")).json()["items"]
    assert [d["id"] for d in listed] == [retry.json()["id"]]


async def test_timed_out_answer_arrives_late(provider: Provider) -> None:
    await provider.control("faults", {"timeoutRate": 1, "timeoutSeconds": 0.2})
    started = time.monotonic()
    response = await provider.http.get("/api/v1/devices", headers=AUTH)
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.19


async def test_stalled_devices_stay_provisioning(provider: Provider) -> None:
    await provider.control("faults", {"provisionStallRate": 1})
    device = await provider.create_ok()
    await provider.advance(3600)
    assert await provider.status(device["id"]) == "provisioning"
    await provider.control("faults", {})
    normal = await provider.create_ok()
    await provider.advance(3600)
    assert await provider.status(normal["id"]) == "ready"
