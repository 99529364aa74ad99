"""When a long-running workflow hands over to a new run, and on which build it continues.

Due when Temporal suggests it or a newer build is current; the new run starts AUTO_UPGRADE
(ignored on an unversioned worker). Why: docs/operations.md, 'With Worker Versioning (recommended)'.
"""

from __future__ import annotations

from typing import Any, NoReturn

from temporalio import workflow

from devicepool.api.names import MEMO_POOL_ROW

__all__ = ["continue_as_new", "hand_over_due", "upgrade_due"]


def upgrade_due() -> bool:
    """A newer build is the deployment's current version (seen at this workflow task)."""
    return workflow.info().is_target_worker_deployment_version_changed()


def hand_over_due() -> bool:
    return workflow.info().is_continue_as_new_suggested() or upgrade_due()


def continue_as_new(input: Any) -> NoReturn:
    """Hand over; a pool's memo row (`row_memo`) goes with it: Temporal starts the new run
    with no memo, and `get` and the gauges would query the pool until its first pass wrote
    the row again. A run that wrote no row (one from before it) passes none: its command is
    the one its history holds."""
    memo = dict(workflow.memo())
    workflow.continue_as_new(
        input,
        memo=memo if MEMO_POOL_ROW in memo else None,
        initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
    )
