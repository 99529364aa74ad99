"""`devicepool_lease_wait_seconds`: how long each granted lease waited, from the answers of the
`lease` and `lease_claim` updates and of the `lease_ticket` query (an ask's grant, as its
holder reads it), both kinds, read from outside the workflow code."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.worker import (
    HandleQueryInput,
    HandleUpdateInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)

from devicepool.activities.metrics import Metrics
from devicepool.api.kinds import KINDS
from devicepool.api.names import QUERY_LEASE_TICKET, UPDATE_LEASE, UPDATE_LEASE_CLAIM
from devicepool.worker.reconcile_timing import ObservingInterceptor

__all__ = ["LeaseWaitInterceptor"]

# The updates whose answer is a grant (a `renew` answers the same shape: not a grant).
GRANTING_UPDATES = frozenset({UPDATE_LEASE, UPDATE_LEASE_CLAIM})
# Lease ids a run remembers having observed (then it starts over: a retry is seconds late).
SEEN_KEPT = 1000


class LeaseWaitInterceptor(ObservingInterceptor):
    """Observes `Granted.waitedSeconds` of every grant a pool's `lease` or `lease_claim`
    update answers (a `lease` granted at once: 0; a claimed offer: how long its ticket
    waited), and of every grant a `lease_ticket` query answers (an ask's: by signal).

    Replay-safe as `ReconcileInterceptor`: an update handler run again while a history is
    replayed (a worker restart, a cache eviction) records nothing, and nothing read here flows
    back into the workflow. A grant is an update's answer, so it is seen once, by the worker
    that ran it live.
    """

    @staticmethod
    def inbound(metrics: Metrics) -> type[WorkflowInboundInterceptor]:
        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                info = outbound.info()
                self._pool = _pool_of(info.workflow_type, info.workflow_id)
                # Leases observed by this run here: a claim sent again (a client's retry)
                # answers the same grant, which waited once.
                self._seen: set[str] = set()
                super().init(outbound)

            async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
                answer = await super().handle_update_handler(input)
                if self._pool is not None and input.update in GRANTING_UPDATES:
                    self._observe(answer, replaying=workflow.unsafe.is_replaying())
                return answer

            async def handle_query(self, input: HandleQueryInput) -> Any:
                # An ask's grant (`lease_ask`: no update answers it) is seen when its holder
                # reads it; a query is never replayed, and a holder stops asking once granted.
                answer = await super().handle_query(input)
                if self._pool is not None and input.query == QUERY_LEASE_TICKET:
                    self._observe(answer, replaying=False)
                return answer

            def _observe(self, answer: Any, *, replaying: bool) -> None:
                grant = _grant(answer)
                if grant is None or grant[0] in self._seen or replaying:
                    return
                if len(self._seen) >= SEEN_KEPT:
                    self._seen.clear()
                self._seen.add(grant[0])
                assert self._pool is not None
                kind, pool = self._pool
                metrics.lease_wait.labels(pool=pool, kind=kind).observe(grant[1])

        return _Inbound


def _pool_of(workflow_type: str, workflow_id: str) -> tuple[str, str] | None:
    """(kind, pool name) of a pool's workflow; None for any other workflow."""
    for kind in KINDS.values():
        if kind.workflow_type == workflow_type:
            name = kind.name_from_workflow_id(workflow_id)
            return (kind.name, name) if name else None
    return None


def _grant(answer: Any) -> tuple[str, float] | None:
    """(lease id, seconds waited) of the grant a `LeaseAnswer` carries; None: no grant in it
    (a ticket, an end). Read by attribute: the answer is whatever the handler returned."""
    granted = getattr(answer, "granted", None)
    lease, waited = getattr(granted, "lease", None), getattr(granted, "waited_seconds", None)
    if not isinstance(lease, str) or not isinstance(waited, int | float):
        return None
    if not 0 <= waited < float("inf"):  # nan, inf, negative: no figure to observe
        return None
    return lease, float(waited)
