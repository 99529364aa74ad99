"""Creation rate limit (per account, sliding virtual minute) and idempotent creates."""

from __future__ import annotations

import asyncio

from tests.emulator.conftest import creates
from tests.helpers.emulator import AUTH, Provider, assert_problem, device_body


async def burst(provider: Provider, count: int, **kwargs) -> list:
    return await asyncio.gather(*(provider.create(**kwargs) for _ in range(count)))


async def test_hundred_at_once_twenty_accepted(provider: Provider) -> None:
    responses = await burst(provider, 100)
    codes = [r.status_code for r in responses]
    assert codes.count(202) == 20
    assert codes.count(429) == 80
    limited = next(r for r in responses if r.status_code == 429)
    assert_problem(limited, 429, "rate_limited")
    assert limited.headers["Retry-After"] == "60"
    assert limited.headers["RateLimit-Limit"] == "20"
    assert limited.headers["RateLimit-Remaining"] == "0"
    assert limited.headers["RateLimit-Reset"] == "60"
    stats = await provider.stats()
    assert stats["creates"] == creates(accepted=20, rateLimited=80)
    assert stats["devices"]["live"] == 20


async def test_remaining_counts_down(provider: Provider) -> None:
    remaining = [(await provider.create()).headers["RateLimit-Remaining"] for _ in range(3)]
    assert remaining == ["19", "18", "17"]


async def test_window_slides(provider: Provider) -> None:
    assert [r.status_code for r in await burst(provider, 10)] == [202] * 10
    await provider.advance(30)
    assert [r.status_code for r in await burst(provider, 10)] == [202] * 10
    limited = await provider.create()
    assert_problem(limited, 429, "rate_limited")
    # The first ten leave the window 60 s after they entered it: 30 s from now.
    assert limited.headers["Retry-After"] == "30"
    await provider.advance(29)
    assert_problem(await provider.create(), 429, "rate_limited")
    await provider.advance(1)
    assert [r.status_code for r in await burst(provider, 11)].count(202) == 10


async def test_retry_after_is_in_real_seconds(make_provider) -> None:
    provider = await make_provider(speed=10, creates_per_minute=1)
    await provider.create_ok()
    limited = await provider.create()
    assert_problem(limited, 429, "rate_limited")
    # 60 virtual seconds at speed 10 is 6 real seconds.
    assert limited.headers["Retry-After"] == "6"
    await provider.control("clock", {"speed": 600})
    assert (await provider.create()).headers["Retry-After"] == "1"  # 0.1 s rounds up to 1


async def test_window_is_shared_by_the_keys_of_one_account(make_provider) -> None:
    provider = await make_provider(accounts={"acme": ["k1", "k2"]}, creates_per_minute=4)
    first = await burst(provider, 3, api_key="k1")
    second = await burst(provider, 3, api_key="k2")
    codes = [r.status_code for r in first + second]
    assert codes.count(202) == 4
    assert codes.count(429) == 2


async def test_accounts_have_independent_windows(make_provider) -> None:
    provider = await make_provider(accounts={"a": ["ka"], "b": ["kb"]}, creates_per_minute=5)
    a = await burst(provider, 8, api_key="ka")
    b = await burst(provider, 8, api_key="kb")
    assert [r.status_code for r in a].count(202) == 5
    assert [r.status_code for r in b].count(202) == 5
    extra = (await provider.stats())["extra"]["accounts"]
    assert extra["a"] == {"live": 5, "accepted": 5, "rateLimited": 3}
    assert extra["b"] == {"live": 5, "accepted": 5, "rateLimited": 3}


async def test_idempotent_replay(provider: Provider) -> None:
    first = await provider.create(
        idempotency_key="same", proxy={"type": "http", "host": "h", "port": 8}
    )
    again = await provider.create(
        idempotency_key="same", proxy={"type": "http", "host": "h", "port": 8}
    )
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    stats = await provider.stats()
    assert stats["creates"]["accepted"] == 1
    assert stats["creates"]["idempotentReplays"] == 1
    assert stats["devices"]["live"] == 1


async def test_replay_is_key_order_insensitive(provider: Provider) -> None:
    body = device_body()
    headers = {**AUTH, "Idempotency-Key": "k"}
    first = await provider.http.post("/api/v1/android/devices", json=body, headers=headers)
    reordered = dict(reversed(list(body.items())))
    again = await provider.http.post("/api/v1/android/devices", json=reordered, headers=headers)
    assert again.json()["id"] == first.json()["id"]


async def test_replays_do_not_use_the_rate_limit(make_provider) -> None:
    provider = await make_provider(creates_per_minute=1)
    created = await provider.create_ok(idempotency_key="k")
    for _ in range(3):
        assert (await provider.create(idempotency_key="k")).json()["id"] == created["id"]
    assert_problem(await provider.create(idempotency_key="other"), 429, "rate_limited")
    assert (await provider.stats())["creates"]["idempotentReplays"] == 3


async def test_key_reused_with_other_body_is_422(provider: Provider) -> None:
    await provider.create_ok(idempotency_key="k", name="one")
    assert_problem(
        await provider.create(idempotency_key="k", name="two"), 422, "idempotency_key_reused"
    )
    # The same body on the other platform path is another request too.
    assert_problem(
        await provider.create(idempotency_key="k", name="one", platform="ios"),
        422,
        "idempotency_key_reused",
    )
    assert (await provider.stats())["creates"]["rejected"] == 2


async def test_idempotency_keys_are_per_account(make_provider) -> None:
    provider = await make_provider(accounts={"a": ["ka"], "b": ["kb"]})
    a = await provider.create_ok(idempotency_key="k", api_key="ka")
    b = await provider.create_ok(idempotency_key="k", api_key="kb", name="different")
    assert a["id"] != b["id"]


async def test_refused_creates_are_not_remembered(make_provider) -> None:
    provider = await make_provider(creates_per_minute=1)
    await provider.create_ok()
    assert_problem(await provider.create(idempotency_key="retry-me"), 429, "rate_limited")
    await provider.advance(60)
    # The retry after a 429 with the same key creates the device.
    await provider.create_ok(idempotency_key="retry-me")
    stats = await provider.stats()
    assert stats["creates"]["accepted"] == 2
    assert stats["creates"]["idempotentReplays"] == 0
