"""The `bitbrowser` adapter marks a removed cloud phone reserve or retired only once
`/phone/running` says it stopped: the vendor's power calls are asynchronous.

The emulator's shutdowns take effect `phone_shutdown_seconds` (virtual) after the call;
it runs 20 times faster than real time, and its clock is skipped for boots.
"""

from __future__ import annotations

from typing import Any

import pytest

from devicepool.activities.providers.base import provider_call
from devicepool.activities.providers.bitbrowser import ShutdownUnconfirmedError
from devicepool.activities.providers.bitbrowser.phone_marks import (
    Remark,
    parked_mark,
    pool_prefix,
    slot_mark,
)
from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
from devicepool.activities.providers.bitbrowser.phone_reserve import STOP_READS
from tests.activities.conftest import bitbrowser_account
from tests.activities.test_bitbrowser_phone_provider import new_device
from tests.helpers.bitbrowser import Account
from tests.helpers.bitbrowser_client import Node

SPEED = 20.0
# Late: after a read or two of `running`. Never within one removal's wait: 10 minutes.
LATE, NEVER = 4.0, 600.0

account = bitbrowser_account(speed=SPEED, seed=5, phone_shutdown_seconds=LATE)


@pytest.fixture
def provider(n1: Node) -> PhoneProvider:
    return PhoneProvider(n1.phones)


async def phones_stats(account: Account) -> dict[str, Any]:
    return dict((await account.stats())["phones"])


def calls(n1: Node, path: str) -> int:
    return sum(1 for p, _ in n1.recorder.calls if p == path)


async def test_a_removal_parks_the_phone_in_reserve_only_once_it_stopped(
    account: Account, provider: PhoneProvider, n1: Node
) -> None:
    made = await provider.create_device(new_device())
    await account.advance(61)
    await provider.list_pool("phones-a")
    n1.recorder.calls.clear()
    await provider.remove_device(made.id)
    stats = await phones_stats(account)
    # Marked reserve only once it was off: nothing billing under the reserve mark.
    assert (stats["running"], stats["shutdowns"]) == (0, 1)
    (phone,) = await n1.phones.list_all(mark_prefix=pool_prefix("phones-a"))
    assert phone.name == parked_mark("phones-a", "reserve")
    paths = [p for p, _ in n1.recorder.calls]
    # The rename came after a `running` read, and the reads were few.
    assert paths.index("/phone/running") < paths.index("/phone/profile/update")
    assert 1 <= calls(n1, "/phone/running") <= STOP_READS
    assert len(paths) <= STOP_READS + 3, paths


@pytest.mark.parametrize("retiring", [True, False], ids=["retired", "reserve"])
async def test_a_phone_still_running_keeps_its_slot_until_a_retry_sees_it_stopped(
    account: Account, n1: Node, retiring: bool
) -> None:
    provider = PhoneProvider(n1.phones)
    made = await provider.create_device(new_device())
    await account.advance(61)
    await provider.list_pool("phones-a")
    account.emulator.phones.times.shutdown = NEVER  # this shutdown outlasts the wait
    n1.recorder.calls.clear()
    with provider_call(pool="phones-a", retiring=retiring):
        with pytest.raises(ShutdownUnconfirmedError) as raised:
            await provider.remove_device(made.id)
    assert raised.value.retryable
    # Never marked while it runs: it keeps its slot's mark, and its pool still lists it.
    (phone,) = await n1.phones.list_all()
    assert phone.name == slot_mark("phones-a", "devicepool:phones-a:g1:s0")
    remark = Remark.parse(phone.remark)
    assert remark is not None and remark.state == "active"
    assert calls(n1, "/phone/profile/update") == 0
    assert calls(n1, "/phone/running") == STOP_READS  # then it gave up, for the retry
    assert len(n1.recorder.calls) <= STOP_READS + 3
    assert [d.id for d in await provider.list_pool("phones-a")] == [made.id]
    # The activity's retry, once the phone is off: marked now.
    await account.advance(NEVER)
    n1.recorder.calls.clear()
    with provider_call(pool="phones-a", retiring=retiring):
        await provider.remove_device(made.id)
    assert calls(n1, "/phone/running") == 1
    stats = await phones_stats(account)
    assert (stats["running"], stats["shutdowns"]) == (0, 1)
    (phone,) = await n1.phones.list_all()
    state = "retired" if retiring else "reserve"
    assert phone.name == parked_mark("phones-a", state)
