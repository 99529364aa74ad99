"""What `PoolClient.apply` and `apply_many` need besides the update itself.

`check_account` refuses a pool whose account no worker serves, before anything starts or
changes (a pool whose references the worker refuses: `_refs_check.RefsCheck`);
`start_or_update` starts the pool or sends it the `apply` update; `apply_in_order` answers many
applies in the pools' order; `tally` counts the answers."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.names import (
    TASK_QUEUE,
    UPDATE_APPLY,
    WORKFLOW_ACCOUNT_LEDGER,
    account_from_ledger_id,
    ledger_workflow_id,
)
from devicepool.api.v1alpha1 import PoolResource
from devicepool.api.v1beta1 import DevicePool
from devicepool.client._kind_sides import Side
from devicepool.client._results import applied_verb
from devicepool.client._temporal_errors import (
    UPDATE_TIMEOUT,
    NoWorkerInTime,
    WorkflowTaskFailing,
)
from devicepool.client.errors import BadInput, DevicePoolError, TemporalUnreachable
from devicepool.workflows.pool.messages import Accepted, ApplyResult

# Pools `apply_many` (`devicepool apply -f DIR/`) applies at once. A new pool
# is one start (Temporal answers once it is stored); a pool that exists waits
# for a worker to run its update, so a few dozen in flight keep a worker busy
# without queueing 1,000 updates on it.
APPLY_CONCURRENCY = 16

# A pool whose workflow task keeps failing (Temporal refuses its update at once) is
# sent again this often, at most this many times: under load, a worker that let the
# task time out finishes it once it catches up.
TASK_FAILING_PAUSE = 5.0
TASK_FAILING_TRIES = 12

# `PoolClient.apply(pool, update_id=...)`.
ApplyOne = Callable[..., Awaitable[Accepted]]


async def check_account(client: Client, address: str, pool: DevicePool, served: set[str]) -> None:
    """Refuse a pool whose account no worker serves (`BadInput` naming the pool and its file).

    A running ledger means some worker serves the account (`worker/accounts.py`); `served` holds
    the accounts already seen, so each is checked once per client, not once a pool.
    """
    account = pool.spec.account
    if account in served:
        return
    handle = client.get_workflow_handle(ledger_workflow_id(account))
    try:
        desc = await handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            served.add(account)
            return
    except RPCError as err:
        if err.status == RPCStatusCode.UNAVAILABLE:
            raise TemporalUnreachable(address, str(err)) from err
        if err.status != RPCStatusCode.NOT_FOUND:
            raise DevicePoolError(f"Temporal: {err.message}") from err
    known: list[str] = []
    query = f"WorkflowType = '{WORKFLOW_ACCOUNT_LEDGER}' AND ExecutionStatus = 'Running'"
    with contextlib.suppress(RPCError):
        async for execution in client.list_workflows(query):
            name = account_from_ledger_id(execution.id)
            if name is not None:
                known.append(name)
    where = f"{pool.source}: " if pool.source else ""
    raise BadInput(
        f"{where}pool {pool.name!r}: "
        f"unknown account {account!r} (spec.provider.account; v1alpha1: spec.providerCredentialRef): "
        "no worker serves it; "
        f"known accounts: {', '.join(sorted(known)) or '(none — is a worker running?)'}"
    )


async def apply_in_order(
    apply: ApplyOne,
    pools: Sequence[PoolResource],
    *,
    concurrency: int,
    on_result: Callable[[Any, Accepted | DevicePoolError], None] | None,
) -> list[Accepted | DevicePoolError]:
    """`apply` each pool, at most `concurrency` at once: the body of `PoolClient.apply_many`.

    A pool whose workflow task keeps failing (`WorkflowTaskFailing`: the worker
    let it time out under load) is sent again with the same update id every
    `TASK_FAILING_PAUSE` seconds, `TASK_FAILING_TRIES` times in all, before its
    error is its answer; the other pools go on meanwhile.
    """
    answers: dict[int, Accepted | DevicePoolError] = {}
    shown = 0
    upcoming = iter(range(len(pools)))
    stopped = False
    last_answer = float("-inf")  # monotonic time some pool was last answered

    async def one(pool: PoolResource) -> Accepted | DevicePoolError:
        nonlocal last_answer
        update_id = str(uuid.uuid4())
        failing = 0
        while True:
            sent = time.monotonic()
            try:
                answer: Accepted | DevicePoolError = await apply(pool, update_id=update_id)
            except NoWorkerInTime as err:
                if last_answer > sent:
                    continue
                return err
            except WorkflowTaskFailing as err:
                failing += 1
                if failing >= TASK_FAILING_TRIES:
                    return err
                await asyncio.sleep(TASK_FAILING_PAUSE)
                continue
            except BadInput as err:
                answer = err
            last_answer = time.monotonic()
            return answer

    async def applier() -> None:
        nonlocal shown, stopped
        for index in upcoming:
            if stopped:
                return
            try:
                answer = await one(pools[index])
            except DevicePoolError as err:
                answer = err
            # A pool's own trouble (its change refused, its task failing) stops no other.
            if isinstance(answer, DevicePoolError) and not isinstance(
                answer, BadInput | WorkflowTaskFailing
            ):
                stopped = True
            answers[index] = answer
            while shown in answers:
                if on_result is not None:
                    on_result(pools[shown], answers[shown])
                shown += 1

    await asyncio.gather(*(applier() for _ in range(min(concurrency, len(pools)))))
    return [answers[i] for i in range(shown)]


def tally(answers: Sequence[Accepted | DevicePoolError], pools: int) -> str:
    """`apply`'s last line over `pools` pools: `1000 pools: 998 created, 2 unchanged`.

    Only the outcomes that happened are named; a pool with no answer was never
    sent (`apply_in_order` starts no further pool after a failure other than a
    refused change).
    """
    counts: dict[str, int] = {}
    for answer in answers:
        what = "failed" if isinstance(answer, DevicePoolError) else applied_verb(answer)
        counts[what] = counts.get(what, 0) + 1
    parts = [
        f"{counts[what]} {what}"
        for what in ("created", "configured", "unchanged", "failed")
        if counts.get(what)
    ]
    if pools > len(answers):
        parts.append(f"{pools - len(answers)} not sent (stopped after the failure)")
    return f"{pools} pool{'' if pools == 1 else 's'}: {', '.join(parts) or 'none applied'}"


async def start_or_update(
    client: Client,
    side: Side,
    pool: PoolResource,
    *,
    errors: Callable[[], contextlib.AbstractContextManager[None]],
    update_id: str | None,
    start_first: bool,
) -> Accepted:
    """`PoolClient.apply` once the pool is checked (`errors` maps what Temporal raises)."""
    kind = side.kind
    body, summary, attributes = side.start(pool)
    starting: dict[str, Any] = {
        "id": kind.workflow_id(pool.name),
        "task_queue": TASK_QUEUE,
        "static_summary": summary,
        "search_attributes": attributes,
    }
    existed = False
    if start_first or not side.update_starts:
        with errors():
            try:
                await client.start_workflow(
                    kind.workflow_type,
                    body,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    **starting,
                )
            except WorkflowAlreadyStartedError:
                existed = True  # it runs: the update below changes it (or not)
            else:
                replicas = pool.spec.replicas  # type: ignore[attr-defined]
                return Accepted(generation=1, replicas=replicas, result=ApplyResult.CREATED)
    with errors():
        if side.update_starts:
            start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
                kind.workflow_type,
                body,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                **starting,
            )
            result = await client.execute_update_with_start_workflow(
                UPDATE_APPLY,
                body,
                start_workflow_operation=start,
                id=update_id,
                result_type=Accepted,
                rpc_timeout=UPDATE_TIMEOUT,
            )
        else:
            handle = client.get_workflow_handle(starting["id"])
            result = await handle.execute_update(
                UPDATE_APPLY, body, result_type=Accepted, rpc_timeout=UPDATE_TIMEOUT
            )
    accepted = result if isinstance(result, Accepted) else Accepted.model_validate(result)
    if existed and accepted.result == ApplyResult.CREATED:
        # Started by another apply whose pool had not run its first task yet:
        # this update was the first the pool handled, but it created nothing.
        changed = accepted.generation > 1
        outcome = ApplyResult.CONFIGURED if changed else ApplyResult.UNCHANGED
        accepted = accepted.model_copy(update={"result": outcome})
    return accepted
