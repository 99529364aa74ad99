"""The GeeLark warm reserve against a cold review's findings (R20, issue 41).

Each test is a sequence the first build got wrong: a retired phone parked and served again
as new; a lowered `spec.reserve.keep` still claimed; a profile cap on a large account
turned into timeouts; a second attempt of one scale-down parking a phone a claim has
since handed to another slot; a claim's partly applied update leaving a slot-named phone
with its old proxy. Why: docs/providers.md, "The warm reserve on GeeLark".
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import ActivityEnvironment

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import TerminateDeviceInput
from devicepool.activities.providers.geelark import GeeLarkApi, GeeLarkProvider
from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from tests.activities.test_geelark_warm_reserve import POOL, _new, _phone, _pid, _running
from tests.helpers.geelark import BASE, Team, team


class Wall:
    """The adapter's wall clock (a remark's created time), moved by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _provider(t: Team, wall: Wall | None = None) -> GeeLarkProvider:
    async def sleep(seconds: float) -> None:
        await t.advance(seconds)

    client = GeeLarkApi(
        base_url=BASE, app_id=DEFAULT_APP_ID, api_key=DEFAULT_API_KEY, transport=t.transport
    )
    return GeeLarkProvider(
        client, sleep=sleep, confirm_seconds=5.0, reserve=True, wall_clock=wall or Wall()
    )


@pytest.fixture
async def t() -> AsyncIterator[Team]:
    async with team() as made:
        yield made


# ------------------------------------------------------------------ 1: retirements


async def test_a_retired_phone_is_deleted_never_served_again_as_new(t: Team) -> None:
    # maxAge, or a person's `replace --when-idle`: the pool removes it only if idle, as a
    # scale-down, but says it retires it. Before, it was parked and the replacement's
    # create claimed it back: the same phone, its age reset.
    wall = Wall()
    provider = _provider(t, wall)
    old = await _running(t, provider, "a")
    wall.now += 8 * 86400  # past a maxAge of 7 days
    acts = DeviceActivities(accounts={}, proxy_pools={})
    acts._providers["gl"] = provider
    retire = TerminateDeviceInput(
        account="gl", device_id=old, pool=POOL, only_if_idle=True, reserve_keep=1, retiring=True
    )
    done = await ActivityEnvironment().run(acts.terminate_device, retire)
    assert done.skipped is None and not done.already_gone
    assert _phone(t, _pid(old)) is None  # stopped, then deleted
    new = await provider.create_device(_new("replacement"))
    assert _pid(new.id) != _pid(old)
    await provider.aclose()
