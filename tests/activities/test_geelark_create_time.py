"""One GeeLark create fits well inside its activity's 20-s attempt (`geelark_fake`, a fake
clock the transport moves): `addNew` is never sent later than 8 s into it, no call later
than 15 s, and no answer is awaited past 18 s; past them the create fails retryable, and
the next attempt finds what this one made by its mark. Otherwise the activity's retry runs
on another worker while this attempt still adds (R12 #4)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest

from devicepool.activities.device_models import PROVISIONING
from devicepool.activities.errors import ProviderError, TransportTimeoutError
from devicepool.activities.models import DeviceTemplate
from devicepool.activities.providers.base import NewDevice
from devicepool.api.names import LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from tests.activities.geelark_fake import Clock, Fake

POOL = "timed"
TEMPLATE = DeviceTemplate(platform="android", region="sgp", os_version="13")
NEW = NewDevice(
    template=TEMPLATE,
    name="d",
    labels={LABEL_POOL: POOL, LABEL_MANAGED_BY: MANAGED_BY},
    idempotency_key="slot-1",
)


def _slow(clock: Clock, seconds: float) -> Any:
    """An answer as the fake gives it, `seconds` (of the fake clock) after it was asked."""

    def answer(fake: Fake, body: dict[str, Any]) -> Any:
        clock.at += timedelta(seconds=seconds)
        path = "phone/addNew" if "data" in body else "phone/list"
        return fake.add_new(body) if path == "phone/addNew" else fake._phone_list(body)

    return answer


async def test_an_add_not_sent_by_8_s_is_not_sent() -> None:
    fake, clock = Fake(), Clock()
    fake.script["phone/list"] = [_slow(clock, 8.5)]
    provider = fake.provider(clock)
    with pytest.raises(ProviderError) as caught:
        await provider.create_device(NEW)
    assert caught.value.retryable and "phone/addNew" not in fake.paths()
    await provider.aclose()


async def test_a_pacer_wait_past_8_s_refuses_the_add() -> None:
    fake, clock = Fake(), Clock()
    fake.script["phone/list"] = [_slow(clock, 4)]
    provider = fake.provider(clock)
    # A 40007 holds addNew until 8.5 s: at 4 s, a wait of 4.5 s, within the pacer's 5 s.
    provider.api.pacer.hold("/open/v1/phone/addNew", 8.5)
    with pytest.raises(ProviderError) as caught:
        await provider.create_device(NEW)
    assert caught.value.retryable and caught.value.retry_after
    assert "phone/addNew" not in fake.paths() and clock.slept == []
    await provider.aclose()


async def test_no_call_after_15_s_and_the_retry_finds_the_phone() -> None:
    fake, clock = Fake(), Clock()
    fake.script["phone/addNew"] = [_slow(clock, 12)]  # sent at 0 s, answered at 12 s
    fake.script["phone/list"] = [_slow(clock, 3.5)]  # the mark: none yet
    provider = fake.provider(clock)
    with pytest.raises(ProviderError) as caught:
        await provider.create_device(NEW)
    assert caught.value.retryable and "phone/start" not in fake.paths()
    info = await provider.create_device(NEW)  # the activity's next attempt
    assert info.status == PROVISIONING and fake.paths().count("phone/addNew") == 1
    assert len(fake.phones) == 1
    await provider.aclose()


async def test_a_create_within_its_times_is_one_attempt() -> None:
    fake, clock = Fake(), Clock()
    fake.script["phone/list"] = [_slow(clock, 3)]
    fake.script["phone/addNew"] = [_slow(clock, 4)]  # sent at 3 s, answered at 7 s
    provider = fake.provider(clock)
    info = await provider.create_device(NEW)
    assert info.status == PROVISIONING
    assert fake.paths() == ["phone/list", "phone/addNew", "phone/start"]
    await provider.aclose()


async def test_no_answer_is_awaited_past_the_attempts_end() -> None:
    # A call sent at 14 s waits for its answer until 18 s, not for the client's 10 s.
    async def never(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200)

    clock = Clock()
    api = Fake().api(clock, transport=httpx.MockTransport(never))
    now = clock.mono()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with api.deadlines(send_by=now + 1, answer_by=now + 0.05):
        with pytest.raises(TransportTimeoutError):
            await api.call("phone/list", {})
    assert loop.time() - began < 5
    await api.aclose()
