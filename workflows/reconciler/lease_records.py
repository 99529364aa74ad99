"""What the lease book keeps and answers: a `Lease` of a member, a `Ticket` waiting for one,
an `Ended` lease or ticket and its `EndReason`; a `Candidate` member, as the kind offers it;
and a request's outcome when no lease is granted now (`Queued`, `NotGranted`).

Pure (no Temporal). `Lease`, `Ticket` and `Ended` are carried in each kind's state
(`leases.py`, the book) and answered to clients (`lease_messages.py`): their fields only gain
defaulted ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from devicepool.api.base import CamelModel

__all__ = [
    "ASK_NOT_GRANTED",
    "ASK_REFUSED",
    "EXPIRING",
    "NOT_USED",
    "Candidate",
    "EndReason",
    "Ended",
    "Lease",
    "NotGranted",
    "Queued",
    "Ticket",
]

# What a `lease_ask` can be answered instead of a lease (`Ended.refusal`, kept beside an
# `EndReason` every earlier build knows, so that a build rolled back to still reads the book):
# turned down (no device can ever match, the queue is full, the pool is deleted), or none
# free and it would not wait.
ASK_REFUSED = "Refused"
ASK_NOT_GRANTED = "NotGranted"


class EndReason(StrEnum):
    RELEASED = "Released"
    EXPIRED = "Expired"  # `expiresAt` passed (the lease's time, or `maxDuration`)
    IDLE = "IdleTimeout"  # the holder neither renewed nor released for `idleTimeout`
    UNCLAIMED = "Unclaimed"  # an offer to a ticket its holder never claimed
    DEVICE_LOST = "DeviceLost"  # the member is gone (offline and replaced, removed)
    REPLACED = "Replaced"  # a person replaced the member (`devicepool replace`)
    POOL_DELETED = "PoolDeleted"
    TIMED_OUT = "TimedOut"  # a ticket that waited its whole `wait` (or `maxWait`)
    CANCELLED = "Cancelled"  # a ticket (or the offer it had) its holder gave up on


# Ends no holder asked for: counted in `expired_total` (events `LeaseExpired`; the metric
# `devicepool_leases_expired_total`).
EXPIRING = frozenset(
    {EndReason.EXPIRED, EndReason.IDLE, EndReason.UNCLAIMED, EndReason.DEVICE_LOST}
)
# Ends after which a member is not replaced or reset (`onRelease`): gone already, going with
# the pool or replaced by a person, or never used (an offer nobody claimed, or given up).
NOT_USED = frozenset(
    {
        EndReason.DEVICE_LOST,
        EndReason.POOL_DELETED,
        EndReason.REPLACED,
        EndReason.UNCLAIMED,
        EndReason.CANCELLED,
    }
)


class Lease(CamelModel):
    id: str
    device: str
    holder: str
    granted_at: datetime
    expires_at: datetime
    # The idle clock: the grant, a claim, a renew.
    renewed_at: datetime
    # What the holder asked for (seconds): a renew without a length renews for as long.
    duration: float
    selector: dict[str, str] = Field(default_factory=dict)
    # The ticket it was offered to ("" if granted at once); unclaimed until its holder polls.
    ticket: str = ""
    claimed: bool = True
    # When its ticket was made (how long the holder waited); None: granted at once.
    queued_at: datetime | None = None


class Ticket(CamelModel):
    id: str
    holder: str
    selector: dict[str, str] = Field(default_factory=dict)
    duration: float
    created_at: datetime
    deadline: datetime


class Ended(CamelModel):
    """A lease or ticket that ended, and why (`device` is "" for a ticket)."""

    id: str
    reason: EndReason
    at: datetime
    device: str = ""
    holder: str = ""
    ticket: str = ""
    message: str = ""
    # A `lease_ask` answered instead of a lease: `ASK_REFUSED`, `ASK_NOT_GRANTED` ("": none).
    refusal: str = ""


@dataclass(frozen=True)
class Candidate:
    """A member ready to lease now, as the kind sees it (in the order it prefers them)."""

    id: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Queued:
    ticket: Ticket
    position: int  # 1: next


@dataclass(frozen=True)
class NotGranted:
    """Nothing free now and the caller will not wait, or the queue is full (`full`)."""

    message: str
    full: bool = False
