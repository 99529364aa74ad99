"""`BrowserPool`: BitBrowser profiles kept on tagged node workers, id `browserpool/<name>`.

A kind on the reconciler shell (`workflows/reconciler/shell.py`); the pass and the
teardown are `kind.BrowserKind`'s. Updates `apply` (here: its payload is the kind's
own), `scale_update`; signals `scale`, `wake`; queries `status`, `spec`, `events`
(the shell's) and `devices` (here). Continue-as-new when suggested, carrying
`BrowserPoolState`; a deletion (cancel) ends the run cancelled once every profile is
deleted.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.activities.settings import PoolSettings
    from devicepool.api import names
    from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
    from devicepool.workflows.browserpool.kind import BrowserKind
    from devicepool.workflows.browserpool.messages import (
        BrowserApplyRequest,
        BrowserPoolInput,
        BrowserPoolState,
        ProfilesView,
    )
    from devicepool.workflows.reconciler.messages import Accepted
    from devicepool.workflows.reconciler.shell import Reconciler

__all__ = ["BrowserPoolWorkflow"]


@workflow.defn(name=names.WORKFLOW_BROWSER_POOL)
class BrowserPoolWorkflow(Reconciler[BrowserPoolSpec, BrowserPoolState]):
    @workflow.init
    def __init__(self, input: BrowserPoolInput) -> None:
        Reconciler.__init__(
            self, metadata=input.metadata, spec=input.spec, state=input.state or BrowserPoolState()
        )
        if self.s.created_at is None:
            self.s.created_at = _first_known(self.s, workflow.info().workflow_start_time)
        self._settings: PoolSettings | None = input.settings
        self.kind = self.browsers = BrowserKind(self)

    @workflow.run
    async def run(self, input: BrowserPoolInput) -> dict[str, Any]:
        if self._settings is None:
            self._settings = await workflow.execute_activity_method(
                DeviceActivityDefinitions.pool_settings,
                start_to_close_timeout=timedelta(seconds=10),
                summary="read the worker's intervals",
            )
        self.show()
        await self.reconcile()
        return self.s.status.to_json_dict()

    @property
    def settings(self) -> PoolSettings:
        assert self._settings is not None
        return self._settings

    @workflow.update(name=names.UPDATE_APPLY)
    def apply(self, request: BrowserApplyRequest) -> Accepted:
        return self.browsers.apply(request)

    @apply.validator
    def _validate_apply(self, request: BrowserApplyRequest) -> None:
        self.refuse_while_deleting()
        if request.metadata.name != self.name:
            raise ValueError(
                f"metadata.name: this pool is {self.name!r}, got {request.metadata.name!r}"
            )

    @workflow.query(name=names.QUERY_DEVICES)
    def devices(self) -> ProfilesView:
        return ProfilesView(profiles=list(self.browsers.rows))


def _first_known(state: BrowserPoolState, started: datetime) -> datetime:
    """When the pool was created, as well as a run that was not told can say: this run's
    start, or the oldest event it carries if that is older."""
    return min([started, *(e.first_time or e.time for e in state.events)])
