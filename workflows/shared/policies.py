"""Retry policies of the activities workflows schedule, defined once.

`PROVIDER_RETRY`: every provider read and write that must eventually succeed, no
attempt limit (a call's `schedule_to_close_timeout` bounds it). Creates have their own
policy in `workflows/provision/workflow.py`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

PROVIDER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
