"""When a long-running workflow hands over to a new run, and on which build it continues.

A run continues as new when its history grows long (Temporal suggests it) or,
on a versioned worker (`worker/versioning.py`), when a newer build became the
deployment's current version: workflows are PINNED to the build they started
on, and a new run starts AUTO_UPGRADE, on the current build. On an unversioned
worker the version never changes and the behaviour is accepted and ignored.
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
