"""The errors a devicepool user can meet, and the exit code each one maps to.

    DevicePoolError            base; `exit_code` 1 (a runtime failure)
    ├── TemporalUnreachable    the Temporal frontend did not answer
    ├── PoolNotFound           no running pool workflow with that name
    ├── WaitTimeout            `--wait` ran out of time before the pool got there
    ├── PoolBlocked            `--wait` stopped at once: the pool reports what
    │                          waiting cannot fix (an unknown proxy pool or
    │                          account; a blocked teardown)
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
    "EXIT_OK",
    "EXIT_RUNTIME",
    "BadInput",
    "DevicePoolError",
    "PoolBlocked",
    "PoolNotFound",
    "TemporalUnreachable",
    "WaitTimeout",
]


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
