"""Retry policies of the activities workflows schedule, defined once.

`PROVIDER_RETRY` is for every provider read and write that must eventually
succeed (lists, status reads, terminations, the finalizer): 1 s doubling to
30 s, no attempt limit. How long a call may keep trying is each call's
`schedule_to_close_timeout`, never the policy. Creates have their own policy in
`workflows/provision/workflow.py`: they stop on the provider's permanent refusals.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

PROVIDER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
