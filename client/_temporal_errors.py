"""Temporal client errors mapped onto the devicepool error tree (`client.errors`), one line each."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta

from temporalio.client import RPCTimeoutOrCancelledError, WorkflowUpdateFailedError
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client.errors import (
    BadInput,
    DevicePoolError,
    PoolNotFound,
    TemporalUnreachable,
)

# Queries need a worker to answer; without one the server holds them. A short
# timeout lets `get` fall back to the search attributes instead of hanging.
QUERY_TIMEOUT = timedelta(seconds=5)
# How long an update waits for a worker to accept it.
UPDATE_TIMEOUT = timedelta(seconds=60)


class NoWorkerInTime(DevicePoolError):
    """No worker took the update within its RPC timeout: none runs, or all are busy."""


class WorkflowTaskFailing(DevicePoolError):
    """Temporal refuses the update at once: the pool's workflow task failed or timed out
    several times in a row (a worker too busy to finish it in time, or one failing it)."""


# What the server answers an update while the workflow task keeps failing (it fails
# updates fast from the third attempt on, rather than queue them behind it).
TASK_FAILING = "Workflow Task in failed state"


@contextlib.contextmanager
def temporal_errors(
    address: str, name: str | None, *, writing: bool = False, kind: str = "devicepool"
) -> Iterator[None]:
    """Turn what the SDK raises for pool `name` (None: no pool yet) into one devicepool error;
    `kind` (`devicepool`, `browserpool`) names the pool's kind in a not-found error."""
    try:
        yield
    except DevicePoolError:
        raise
    except WorkflowUpdateFailedError as err:
        raise BadInput(f'pool "{name}" rejected the change: {_cause_message(err)}') from err
    except RPCTimeoutOrCancelledError as err:
        what = "accept the change" if writing else "answer"
        raise NoWorkerInTime(
            f'pool "{name}": no worker did {what} in time — is `devicepool worker` '
            f"(or `devicepool dev`) running?"
        ) from err
    except RPCError as err:
        if err.status == RPCStatusCode.UNAVAILABLE:
            raise TemporalUnreachable(address, str(err)) from err
        if TASK_FAILING in (err.message or ""):
            raise WorkflowTaskFailing(
                f'pool "{name}": its workflow task keeps failing or timing out, so Temporal '
                "refuses changes for now — is the worker overloaded, or failing it (its log)?"
            ) from err
        if err.status == RPCStatusCode.NOT_FOUND and name is not None:
            raise PoolNotFound(name, kind=kind) from err
        message = err.message.splitlines()[0] if err.message else str(err)
        if "search attribute" in message.lower():
            raise DevicePoolError(f"{message} — register them with `devicepool setup`") from err
        raise DevicePoolError(f"Temporal: {message}") from err


def _cause_message(err: BaseException) -> str:
    """The first line of the validator's own message, under the SDK's wrapping."""
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, FailureError):  # an ApplicationError's `str` leads with its type
            return cause.message.splitlines()[0]
        cause = cause.__cause__
    return str(err)
