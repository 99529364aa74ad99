"""A grant on its way does not hold up the next round of the account's ledger.

Seen at 1,000 pools on an overloaded dev server: one round signalled 861
batches, 30 of those deliveries never completed, and the ledger, waiting for
all of them before its next round, granted nothing more for half an hour
(and never continued as new). Here a worker interceptor holds the delivery
to one requester for a while (a timer in the ledger's own history, so the
stand-in is deterministic); another requester asking meanwhile must be
granted at once.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    Interceptor,
    SignalExternalWorkflowInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.activities.ledger_calls import ledger_hold
from devicepool.activities.models import LedgerConfig
from devicepool.api.names import (
    QUERY_LEDGER,
    SIGNAL_PERMIT_REQUEST,
    WORKFLOW_ACCOUNT_LEDGER,
    ledger_workflow_id,
)
from devicepool.testing import eventually
from devicepool.worker.build import new_worker
from devicepool.workflows.ledger.state import LedgerInput
from devicepool.workflows.ledger.workflow import AccountLedgerWorkflow
from devicepool.workflows.shared.protocol import PermitRequest
from tests.helpers.ratelimit_stack import GrantCatcher, got

pytestmark = pytest.mark.devserver

# Twice the bound on the other requester's grant (a round trip or two, on a busy machine).
HELD = timedelta(seconds=10)


class SlowDelivery(Interceptor):
    """The ledger's grants to a requester whose id ends in "-slow" take `HELD` to leave."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                if outbound.info().workflow_type == WORKFLOW_ACCOUNT_LEDGER:
                    outbound = Outbound(outbound)
                super().init(outbound)

        return Inbound


class Outbound(WorkflowOutboundInterceptor):
    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        if input.workflow_id.endswith("-slow"):
            await workflow.sleep(HELD)
        await super().signal_external_workflow(input)


async def test_a_grant_on_its_way_does_not_hold_up_the_next_round(
    rl_env: WorkflowEnvironment,
) -> None:
    client = rl_env.client
    tag = uuid.uuid4().hex[:8]
    queue, account = f"ledger-delivery-{tag}", f"delivery-{tag}"
    worker = new_worker(
        client,
        task_queue=queue,
        activities=[ledger_hold],
        workflows=[AccountLedgerWorkflow, GrantCatcher],
        interceptors=[SlowDelivery()],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        ledger = await client.start_workflow(
            AccountLedgerWorkflow.run,
            LedgerInput(
                account=account,
                config=LedgerConfig(capacity=10, window_seconds=60, margin_seconds=0.1),
            ),
            id=ledger_workflow_id(account),
            task_queue=queue,
        )
        slow, fast = [
            await client.start_workflow(
                GrantCatcher.run, id=f"catcher-{tag}-{kind}", task_queue=queue
            )
            for kind in ("slow", "fast")
        ]
        try:
            await ledger.signal(SIGNAL_PERMIT_REQUEST, _request(slow.id, "slow"))

            async def granted_slow() -> bool:
                state = await ledger.query(QUERY_LEDGER)
                return bool(state["outstanding"] == 2)

            await eventually(granted_slow, what="the slow requester's grant booked", timeout=10)
            started = asyncio.get_running_loop().time()
            await ledger.signal(SIGNAL_PERMIT_REQUEST, _request(fast.id, "fast"))

            await eventually(lambda: got(fast, 2), what="the other requester's grant", timeout=30)
            took = asyncio.get_running_loop().time() - started
            assert took < HELD.total_seconds() / 2, took  # not after the held delivery
            assert await slow.query(GrantCatcher.got) == 0  # still on its way
            await eventually(
                lambda: got(slow, 2), what="the held grant, delivered late", timeout=30
            )
        finally:
            for handle in (ledger, slow, fast):
                await handle.terminate()


def _request(requester: str, pool: str) -> PermitRequest:
    return PermitRequest(request_id=f"{requester}/1", requester=requester, pool=pool, count=2)
