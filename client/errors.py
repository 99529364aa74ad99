"""The errors a devicepool user can meet, and the exit code each one maps to.

    DevicePoolError            base; `exit_code` 1 (a runtime failure)
    ├── TemporalUnreachable    the Temporal frontend did not answer
    ├── TemporalBusy           a call turned away for now (Temporal's limit of updates
    │                          in flight, a full query buffer; a pool handing over)
    │                          for as long as it could wait
    ├── PoolNotFound           no running pool workflow with that name
    ├── WaitTimeout            `--wait` ran out of time before the pool got there
    ├── PoolBlocked            `--wait` stopped at once: the pool reports what
    │                          waiting cannot fix (an unknown proxy pool or
    │                          account; a blocked teardown)
    ├── LeaseRefused           exit_code 3: a lease that can never be granted (a
    │                          selector no device can match, a full queue, a pool
    │                          being deleted)
    ├── LeaseGone              exit_code 3: a renew (or claim) of a lease or ticket
    │                          the pool no longer holds (expired, released, unknown)
    ├── LeaseNotGranted        exit_code 4: no device was free, or none within the wait
    └── BadInput               exit_code 2: a manifest, flag or value was rejected
                               locally (nothing was started or updated) or by the
                               workflow's update validator

`str()` of each is one line: the CLI prints it on stderr as is.
"""

from __future__ import annotations

from devicepool.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_RUNTIME,
    DevicePoolError,
    TemporalUnreachable,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_NOT_GRANTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_RUNTIME",
    "BadInput",
    "DevicePoolError",
    "LeaseGone",
    "LeaseNotGranted",
    "LeaseRefused",
    "PoolBlocked",
    "PoolNotFound",
    "TemporalBusy",
    "TemporalUnreachable",
    "WaitTimeout",
]

# Leases (docs/leases.md): refused or gone (waiting cannot help), and not granted in time.
EXIT_REFUSED = 3
EXIT_NOT_GRANTED = 4


class PoolNotFound(DevicePoolError):
    def __init__(self, name: str, kind: str = "devicepool") -> None:
        self.name = name
        # `devicepool` or `browserpool`: how the CLI names the pool, and its workflow id's prefix
        where = f"{kind}/{name}"
        shown = f'pool "{name}"' if kind == "devicepool" else where
        super().__init__(f"{shown} not found (no running workflow {where})")


class WaitTimeout(DevicePoolError):
    pass


class PoolBlocked(DevicePoolError):
    """The pool reports a condition that no amount of waiting fixes; `reason` and
    `message` are the condition's."""

    def __init__(self, name: str, what: str, reason: str, message: str, hint: str = "") -> None:
        self.name, self.reason, self.message = name, reason, message
        super().__init__(f'pool "{name}" {what}: {reason}: {message}{hint}')


class BadInput(DevicePoolError):
    exit_code = EXIT_BAD_INPUT


class TemporalBusy(DevicePoolError):
    """Temporal answered, but the call kept being turned away for now (the limit of updates
    in flight on one workflow, a full query buffer, a run handing over) until its own budget
    ran out. The message names the cause; trying again later can succeed."""


class LeaseRefused(DevicePoolError):
    """The pool will never grant this lease as asked: no device can match the selector,
    the queue is full, or the pool is being deleted."""

    exit_code = EXIT_REFUSED


class LeaseGone(DevicePoolError):
    """The lease (or ticket) is no longer held: it expired, was released, its device was
    lost, or the pool never knew it. The message says how it ended when the pool knows."""

    exit_code = EXIT_REFUSED


class LeaseNotGranted(DevicePoolError):
    """No device was granted: none was free and the call would not wait, or none came
    free within its wait (the ticket is dropped)."""

    exit_code = EXIT_NOT_GRANTED
