"""`devicepool_reconcile_duration_seconds`: DevicePool reconcile passes, timed from outside."""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.worker import (
    ContinueAsNewInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from devicepool.activities.metrics import Metrics
from devicepool.api.names import WORKFLOW_DEVICE_POOL


class ObservingInterceptor(Interceptor):
    """Observes workflow runs into a worker's `metrics` from outside their code: each run gets
    the inbound interceptor class `inbound(metrics)` makes (a subclass says which)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return self.inbound(self._metrics)

    @staticmethod
    def inbound(metrics: Metrics) -> type[WorkflowInboundInterceptor]:
        raise NotImplementedError


class ReconcileInterceptor(ObservingInterceptor):
    """Times DevicePool reconcile passes from outside the workflow code.

    Replay-safe: it records only while `workflow.unsafe.is_replaying()` is False, and a pass
    that began during replay is discarded, so nothing is observed twice; its clock never flows
    back into workflow state. A pass begins when the pool lists its devices (`list_devices`) or
    its `watch_devices` returns a change, and ends when the pool starts the next watch or
    continues as new; a pass woken while the watch still runs starts none and is not measured.
    """

    @staticmethod
    def inbound(metrics: Metrics) -> type[WorkflowInboundInterceptor]:
        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                if outbound.info().workflow_type == WORKFLOW_DEVICE_POOL:
                    outbound = _ReconcileOutbound(outbound, metrics)
                super().init(outbound)

        return _Inbound


OBSERVE_ACTIVITY = "list_devices"
WATCH_ACTIVITY = "watch_devices"


class _ReconcileOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, metrics: Metrics) -> None:
        super().__init__(next)
        self._metrics = metrics
        self._started: float | None = None

    def _live(self) -> bool:
        if workflow.unsafe.is_replaying():
            self._started = None
            return False
        return True

    def _begin(self) -> None:
        if self._live():
            self._started = _now()

    def _end(self) -> None:
        started, self._started = self._started, None
        if started is not None and self._live():
            self._metrics.reconcile.observe(max(0.0, _now() - started))

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity == WATCH_ACTIVITY:
            self._end()
        elif input.activity == OBSERVE_ACTIVITY:
            self._begin()
        handle = super().start_activity(input)
        if input.activity == WATCH_ACTIVITY:
            handle.add_done_callback(self._watch_done)
        return handle

    def _watch_done(self, task: asyncio.Future[Any]) -> None:
        # Cancelled at continue-as-new or deletion: no pass follows.
        if not task.cancelled():
            self._begin()

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        self._end()
        super().continue_as_new(input)


def _now() -> float:
    # Metrics only, never workflow state: see ReconcileInterceptor.
    with workflow.unsafe.sandbox_unrestricted():
        return time.monotonic()
