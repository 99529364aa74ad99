"""When a long-running workflow hands over to a new run, and on which build it continues.

Due when Temporal suggests it or a newer build is current; the new run starts AUTO_UPGRADE
(ignored on an unversioned worker). Why: docs/operations.md, 'With Worker Versioning (recommended)'.
"""

from __future__ import annotations

from typing import Any, NoReturn

from temporalio import workflow

__all__ = ["continue_as_new", "hand_over_due", "upgrade_due"]


def upgrade_due() -> bool:
    """A newer build is the deployment's current version (seen at this workflow task)."""
    return workflow.info().is_target_worker_deployment_version_changed()


def hand_over_due() -> bool:
    return workflow.info().is_continue_as_new_suggested() or upgrade_due()


def continue_as_new(input: Any) -> NoReturn:
    workflow.continue_as_new(
        input, initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
    )
