"""`onRelease: reset` on Local API cloud phones (docs/leases.md, "onRelease: reset"): a phone
given back is fresh-started once (`/phone/profile/recover`), granted to no one meanwhile, then
leasable again as the same device; past its month's quota it is replaced instead.

On the cloud-phone stack (the session dev server's `cloud-phones` namespace, an in-process
emulator 10 times faster than real time, as in `test_pool_leases.py`), with one fresh start
a month per phone so the quota is reached at the second release.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import (
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment

from devicepool.testing import eventually
from devicepool.workflows.reconciler.lease_messages import (
    Granted,
)
from tests.helpers import leases
from tests.helpers.leases import all_ready, granted, reasons
from tests.helpers.phones import ACCOUNT, Phones, phone_of, phone_stack
from tests.helpers.settings import PHONES
from tests.helpers.workflow_stack import POLL

NAME = "phones-reset"


@pytest.fixture(scope="module")
async def phones(env: WorkflowEnvironment) -> AsyncIterator[Phones]:
    async with phone_stack(
        env, name=NAME, seed=41, settings=PHONES, phone_recovers_per_month=1
    ) as phones:
        yield phones


async def lease(handle: WorkflowHandle[Any, Any]) -> Granted:
    return await granted(handle, holder="ci", duration="30m")


async def release(handle: WorkflowHandle[Any, Any], lease_id: str) -> None:
    answer = await leases.release(handle, lease_id)
    assert answer.reason == "Released", answer


async def refused(handle: WorkflowHandle[Any, Any]) -> str:
    """The type a `lease` without waiting is refused with."""
    return str((await leases.refused(leases.lease(handle, holder="ci"))).type)


@pytest.mark.devserver
async def test_a_phone_given_back_is_fresh_started_once_then_past_its_quota_replaced(
    phones: Phones,
) -> None:
    handle = await leases.start_beta_pool(
        phones.client,
        NAME,
        1,
        settings=PHONES,
        provider={"account": ACCOUNT},
        proxy={"poolRef": "proxyseller-us", "sessionTTL": "15m"},
        leases={"onRelease": "reset"},
    )
    await eventually(lambda: all_ready(handle, 1), what="1 phone ready", timeout=60, every=POLL)

    # Given back: not granted to anyone until it is reset and up again.
    first = await lease(handle)
    await release(handle, first.lease)
    assert await refused(handle) == "LeaseNotGranted"
    await eventually(lambda: _recovers(phones, 1), what="the fresh start", timeout=20, every=POLL)
    assert await refused(handle) == "LeaseNotGranted"  # rebooting
    second = await _lease_when_ready(handle)
    assert second.device == first.device and phones.recovers() == 1  # asked once
    assert "Reset" in await reasons(handle)

    # The month's one fresh start is used: the phone is replaced (a new device), not reused.
    await release(handle, second.lease)
    await eventually(
        lambda: _has_reason(handle, "ResetQuotaUsed"), what="quota used", timeout=20, every=POLL
    )
    third = await _lease_when_ready(handle, timeout=60)
    assert phone_of(third.device) != phone_of(first.device) and phones.recovers() == 1
    # The used phone is off and retired: no later create claims it unreset.
    await eventually(
        lambda: _retired(phones, first.device),
        what="the used phone retired",
        timeout=20,
        every=POLL,
    )
    await release(handle, third.lease)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()


async def _lease_when_ready(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> Granted:
    granted: list[Granted] = []

    async def one() -> bool:
        try:
            granted.append(await lease(handle))
        except WorkflowUpdateFailedError:
            return False
        return True

    await eventually(one, what="a phone leased", timeout=timeout, every=POLL)
    return granted[0]


async def _recovers(phones: Phones, n: int) -> bool:
    return phones.recovers() == n


async def _retired(phones: Phones, device: str) -> bool:
    return phones.state(device) == ("off", "retired")


async def _has_reason(handle: WorkflowHandle[Any, Any], reason: str) -> bool:
    return reason in await reasons(handle)
