"""The `lease_connect` update (both kinds): a held lease's connect info, read now by the kind's
activity and answered to its holder, never written to history in clear.

Its validator refuses at once while the worker writes payloads in clear, naming the
alternative (`devicepool connect` reads the provider outside Temporal), and refuses a lease not
held (or offered, not yet claimed). A command only when a lease is held: no recorded history
has one.
docs/leases.md, "Connect info".
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import ConfigDict
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from devicepool.activities.connect_models import ConnectInfo
    from devicepool.activities.definitions import DeviceActivityDefinitions
    from devicepool.api.base import CamelModel
    from devicepool.api.errors import ErrorType
    from devicepool.workflows.reconciler.lease_checks import LEASE_GONE, LEASE_REFUSED
    from devicepool.workflows.reconciler.lease_messages import LeaseRef, ended_message
    from devicepool.workflows.shared.errors import error_message, error_type

if TYPE_CHECKING:
    from devicepool.workflows.reconciler.leasing import Leasing

__all__ = ["CONNECT_FAILED", "NOT_ENCRYPTED", "ConnectAnswer", "answer_connect", "check_connect"]

# The provider did not answer the connect info (the activity failed): exit 1.
CONNECT_FAILED = "ConnectFailed"
NOT_ENCRYPTED = (
    "connect info is answered only through encrypted history, and this pool's worker writes"
    " payloads in clear (no `encryption.keyFiles`): read it outside Temporal with"
    " `devicepool connect POOL LEASE --config WORKER_CONFIG`"
)


class ConnectAnswer(CamelModel):
    """Update `lease_connect`'s answer: the lease's device and how to reach it."""

    model_config = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})

    lease: str
    device: str
    connect: ConnectInfo


def check_connect(leasing: Leasing, request: LeaseRef) -> None:
    # First: a pool whose worker writes in clear never answers it, for any lease.
    if not leasing.kind.history_encrypted():
        raise ApplicationError(NOT_ENCRYPTED, type=LEASE_REFUSED, non_retryable=True)
    book = leasing.book
    lease = book.lease(request.lease)
    if lease is None:
        ended = book.ended_as(request.lease)
        name = leasing.h.name
        message = ended_message(ended) if ended else f"pool {name!r} has no lease {request.lease!r}"
        raise ApplicationError(message, type=LEASE_GONE, non_retryable=True)
    if not lease.claimed:
        raise ApplicationError(
            f"lease {lease.id} is offered, not yet claimed: claim it first (`lease_claim`)",
            type=LEASE_GONE,
            non_retryable=True,
        )


async def answer_connect(leasing: Leasing, request: LeaseRef) -> ConnectAnswer:
    leasing._count()  # a lease update: the run hands over after `UPDATES_PER_RUN`
    lease = leasing.book.lease(request.lease)
    if lease is None:  # ended between the validator and here
        check_connect(leasing, request)
    assert lease is not None
    # The flag the run holds may be older than the worker's config (a BrowserPool carries its
    # settings across runs): the workers that will write this answer say so now.
    now = await workflow.execute_activity_method(
        DeviceActivityDefinitions.pool_settings,
        start_to_close_timeout=timedelta(seconds=10),
        summary="does the worker encrypt history?",
    )
    if not now.history_encrypted:
        raise ApplicationError(NOT_ENCRYPTED, type=LEASE_REFUSED, non_retryable=True)
    try:
        info: ConnectInfo = await leasing.kind.lease_connect(lease.device)
    except ActivityError as err:
        # A worker that writes in clear refuses it too (`invalid_state`): its flag was stale.
        refused = error_type(err) == ErrorType.INVALID_STATE.value
        raise ApplicationError(
            f"connect info of {lease.device}: {error_message(err)}",
            type=LEASE_REFUSED if refused else CONNECT_FAILED,
            non_retryable=True,
        ) from None
    if leasing.book.lease(request.lease) is None:  # ended while it was read: not the holder's
        check_connect(leasing, request)
    return ConnectAnswer(lease=lease.id, device=lease.device, connect=info)
