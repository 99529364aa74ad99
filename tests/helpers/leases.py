"""The lease messages as a test sends them: raw updates and queries on a pool's handle.

`lease` answers whatever the pool answers (a grant or a ticket); `granted` and `claim`
insist on a device; `refused` is the ApplicationError an update was turned away with (a
validator's refusal, so no history). `reasons` reads the pool's events, `all_ready` its
status, `start_beta_pool` starts a v1beta1 pool with `spec.leases` on the session stack.
For the pure tests of what a kind tells its lease book: `T0`, `POOL_SPEC` (a DevicePool of
3 in us-west) and `ended` (a lease's end, as the book reports it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from devicepool.activities.models import PoolSettings
from devicepool.api import names
from devicepool.api.v1beta1 import DevicePoolSpec
from devicepool.client._lease_calls import turned_away
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.reconciler import lease_messages as lm
from devicepool.workflows.reconciler.lease_records import Ended, EndReason
from tests.helpers.manifests import beta_pool
from tests.helpers.settings import FAST

Handle = WorkflowHandle[Any, Any]

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
POOL_SPEC = DevicePoolSpec.model_validate(
    {
        "provider": {"name": "bitcloudphone", "account": "default"},
        "platform": "android",
        "region": "us-west",
        "replicas": 3,
    }
)


def ended(device: str, reason: EndReason = EndReason.RELEASED, *, at: datetime = T0) -> Ended:
    """The end of the lease `l-<device>` of `device`, for `reason`, at `at`."""
    return Ended(id=f"l-{device}", device=device, reason=reason, at=at)


async def start_beta_pool(
    client: Client, name: str, replicas: int, *, settings: PoolSettings = FAST, **spec: Any
) -> Handle:
    """A DevicePool of `beta_pool(name, replicas, **spec)` on the pool queue."""
    pool = beta_pool(name, replicas, **spec)
    return await client.start_workflow(
        "DevicePool",
        PoolInput(metadata=pool.metadata, spec=pool.spec, settings=settings),
        id=names.pool_workflow_id(name),
        task_queue=names.TASK_QUEUE,
    )


async def update(
    handle: Handle, name: str, arg: Any, result_type: type[Any], update_id: str | None = None
) -> Any:
    """The update's answer; sent again under the same id (one outcome, however many tries)
    while Temporal turns it away for now, as the product's client does (`turned_away`: on a
    loaded CI machine a workflow task can fail before the update is accepted)."""
    update_id = update_id or f"{name}-{uuid.uuid4()}"
    for _ in range(20):
        try:
            return await handle.execute_update(name, arg, result_type=result_type, id=update_id)
        except Exception as err:
            if turned_away(err) is None:
                raise
            await asyncio.sleep(0.5)
    return await handle.execute_update(name, arg, result_type=result_type, id=update_id)


async def lease(handle: Handle, *, update_id: str | None = None, **asked: Any) -> lm.LeaseAnswer:
    """A `lease` update of `LeaseRequest(**asked)`, under `update_id` if given."""
    answer: lm.LeaseAnswer = await update(
        handle, names.UPDATE_LEASE, lm.LeaseRequest(**asked), lm.LeaseAnswer, update_id
    )
    return answer


async def granted(handle: Handle, **asked: Any) -> lm.Granted:
    """A lease that must be granted at once."""
    answer = await lease(handle, **asked)
    assert answer.granted is not None, answer
    return answer.granted


async def claim(handle: Handle, ticket: str) -> lm.Granted:
    answer = await update(
        handle, names.UPDATE_LEASE_CLAIM, lm.TicketRef(ticket=ticket), lm.LeaseAnswer
    )
    assert answer.granted is not None, answer
    return answer.granted


async def ticket_state(handle: Handle, ticket: str) -> lm.LeaseAnswer:
    return await handle.query(
        names.QUERY_LEASE_TICKET, lm.TicketRef(ticket=ticket), result_type=lm.LeaseAnswer
    )


async def offered(handle: Handle, ticket: str) -> lm.LeaseAnswer | None:
    """The ticket's answer once it is offered a device (None while it waits)."""
    answer = await ticket_state(handle, ticket)
    assert answer.ended is None, answer
    return answer if answer.granted is not None else None


async def renew(handle: Handle, lease_id: str) -> lm.LeaseAnswer:
    answer: lm.LeaseAnswer = await update(
        handle, names.UPDATE_RENEW, lm.RenewRequest(lease=lease_id), lm.LeaseAnswer
    )
    return answer


async def release(handle: Handle, lease_id: str, *, replace: bool = False) -> lm.ReleaseAnswer:
    answer: lm.ReleaseAnswer = await update(
        handle,
        names.UPDATE_RELEASE,
        lm.ReleaseRequest(lease=lease_id, replace=replace),
        lm.ReleaseAnswer,
    )
    return answer


async def view(handle: Handle) -> lm.LeasesView:
    return await handle.query(names.QUERY_LEASES, result_type=lm.LeasesView)


async def refused(call: Awaitable[Any], type_: str | None = None) -> ApplicationError:
    """The ApplicationError an update was failed with (of `type_`, if given)."""
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await call
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert type_ is None or cause.type == type_, cause
    return cause


async def reasons(handle: Handle) -> list[str]:
    """The reasons of the pool's events, oldest first."""
    return [e["reason"] for e in (await handle.query("events"))["events"]]


async def all_ready(handle: Handle, n: int) -> bool:
    """The pool has `n` devices, all of them ready."""
    status = await handle.query("status")
    return bool(status["readyDevices"] == n == len(status["deviceIds"] or []))
