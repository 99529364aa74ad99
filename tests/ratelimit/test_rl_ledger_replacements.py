"""A replacement is dealt at once after an idle spell; growth waits out the margin.

The ledger holds the first request after an idle spell for `margin`, so pools
that start growing together share the first window. Replacements are dealt
ahead of growth whoever else joins, so holding them only delays a device that
went missing (seen at 1,000 pools: the hold and its local activity were part
of the time from the offline threshold to the replacement's create).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner

from devicepool.activities.ledger_calls import ledger_hold
from devicepool.activities.models import LedgerConfig
from devicepool.api.names import SIGNAL_PERMIT_REQUEST, ledger_workflow_id
from devicepool.testing import eventually
from devicepool.worker.build import new_worker
from devicepool.workflows.ledger.state import LedgerInput
from devicepool.workflows.ledger.workflow import AccountLedgerWorkflow
from devicepool.workflows.shared.protocol import PermitRequest
from tests.helpers.ratelimit_stack import GrantCatcher, got

pytestmark = pytest.mark.devserver

MARGIN = 6.0


@pytest.mark.parametrize("replacement", [True, False], ids=["replacement", "growth"])
async def test_only_growth_waits_for_the_first_window_margin(
    rl_env: WorkflowEnvironment, replacement: bool
) -> None:
    client = rl_env.client
    tag = uuid.uuid4().hex[:8]
    queue, account = f"ledger-first-{tag}", f"first-{tag}"
    async with new_worker(
        client,
        task_queue=queue,
        activities=[ledger_hold],
        workflows=[AccountLedgerWorkflow, GrantCatcher],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        ledger = await client.start_workflow(
            AccountLedgerWorkflow.run,
            LedgerInput(
                account=account,
                config=LedgerConfig(capacity=10, window_seconds=60, margin_seconds=MARGIN),
            ),
            id=ledger_workflow_id(account),
            task_queue=queue,
        )
        catcher = await client.start_workflow(
            GrantCatcher.run, id=f"catcher-{tag}", task_queue=queue
        )
        try:
            started = asyncio.get_running_loop().time()
            request = PermitRequest(
                request_id=f"{catcher.id}/1",
                requester=catcher.id,
                pool=f"pool-{tag}",
                count=1,
                replacement=replacement,
            )
            await ledger.signal(SIGNAL_PERMIT_REQUEST, request)
            await eventually(lambda: got(catcher, 1), what="the grant", timeout=MARGIN + 20)
            took = asyncio.get_running_loop().time() - started
            if replacement:
                assert took < MARGIN / 2, took  # dealt at once
            else:
                assert took >= MARGIN, took  # the first window's hold is kept for growth
        finally:
            for handle in (ledger, catcher):
                await handle.terminate()
