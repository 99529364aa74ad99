"""What the lease updates and queries take and answer (camelCase JSON: the stock `temporal`
CLI sends `{"selector": {"region": "us-east"}, "duration": "10m", "wait": "60s"}`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict, Field, field_validator

from devicepool.api.base import CamelModel
from devicepool.api.labels import check_label_key, check_label_value
from devicepool.api.v1beta1 import Duration
from devicepool.workflows.reconciler.lease_records import Ended, Lease, Ticket

__all__ = [
    "ASK_PATTERN",
    "Granted",
    "LeaseAnswer",
    "LeaseAsk",
    "LeaseRef",
    "LeaseRequest",
    "LeasesView",
    "ReleaseAnswer",
    "ReleaseRequest",
    "RenewRequest",
    "TicketRef",
    "granted",
]

MAX_HOLDER = 128
# A `lease_ask`'s id: the asker's own, one token (it names the ticket and the lease's ask).
ASK_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
# Carried in every ticket of the pool's state: a selector is a few pairs, never thousands.
MAX_SELECTOR = 16

# Answers a newer worker may extend: an older client ignores what it does not know.
_LENIENT = ConfigDict(**{**CamelModel.model_config, "extra": "ignore"})


class LeaseRequest(CamelModel):
    """Update `lease`: a ready device matching `selector`, for `duration` (unset: the
    pool's `leases.maxDuration`); `wait` > 0: a ticket in the queue if none is free."""

    selector: dict[str, str] = Field(default_factory=dict)
    holder: str = Field(default="", max_length=MAX_HOLDER)
    duration: Duration | None = Field(default=None, gt=0)
    wait: Duration = Field(default=0.0, ge=0)

    @field_validator("holder")
    @classmethod
    def _one_line(cls, holder: str) -> str:
        # Shown in tables, events and the Web UI: one printable line.
        if any(not c.isprintable() for c in holder):
            raise ValueError("must be one line of printable characters")
        return holder

    @field_validator("selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        if len(selector) > MAX_SELECTOR:
            raise ValueError(f"at most {MAX_SELECTOR} key=value pairs, got {len(selector)}")
        for key, value in selector.items():
            check_label_key(key)
            check_label_value(value)
        return selector


class LeaseAsk(LeaseRequest):
    """Signal `lease_ask`: a `lease` asked for by signal under the asker's own id `ask`.
    Nothing is answered: `lease_ticket` with the same id reads the grant, the place in the
    queue, or why not (`Refused`, `NotGranted`, `TimedOut` after a wait); `lease_give_back`
    with it gives back either. Sent again under the same id, it changes nothing, but for an
    offer read (`offered`) that it claims (the asker is alive)."""

    ask: str = Field(pattern=ASK_PATTERN)


class TicketRef(CamelModel):
    """Update `lease_claim`, query `lease_ticket`: the ticket a `lease` answered."""

    ticket: str


class LeaseRef(CamelModel):
    lease: str


class RenewRequest(CamelModel):
    """Update `renew`: the lease again for `duration` (unset: as long as it was taken for)."""

    lease: str
    duration: Duration | None = Field(default=None, gt=0)


class ReleaseRequest(CamelModel):
    """Update `release`, signal `lease_give_back`: give the lease back (or drop a ticket; a
    `lease_ask`'s id names either); `replace`: the device is not to be used again (a new one
    is made)."""

    lease: str
    replace: bool = False


class Granted(CamelModel):
    """A lease its holder has: the id is the fencing token its renews and release name."""

    model_config = _LENIENT

    lease: str
    pool: str
    device: str
    holder: str
    granted_at: datetime
    expires_at: datetime
    # How long its ticket waited in the queue (0: granted at once).
    waited_seconds: float = 0.0


class LeaseAnswer(CamelModel):
    """`granted`, or a ticket still waiting (`ticket`, `position`, `deadline`), or neither
    (`ended`: why, `message`)."""

    model_config = _LENIENT

    granted: Granted | None = None
    ticket: str | None = None
    position: int | None = None
    deadline: datetime | None = None
    # Set when neither: the ticket's or lease's end (`TimedOut`, `Unclaimed`, ...).
    ended: str | None = None
    message: str = ""
    # `granted` is an offer to a ticket, not yet claimed: `lease_claim` it (or, for an ask,
    # send the same `lease_ask` again) within 30 s, or it goes to the next ticket.
    offered: bool = False


class ReleaseAnswer(CamelModel):
    model_config = _LENIENT

    # `Released` now, or how it had ended before (a release is idempotent).
    reason: str
    message: str = ""
    # This release ended the lease (or dropped the ticket); False: it had ended before.
    released_now: bool = False


class LeasesView(CamelModel):
    """Query `leases`: the leases held, then the tickets waiting (first come first)."""

    model_config = _LENIENT

    leases: list[Lease] = Field(default_factory=list)
    tickets: list[Ticket] = Field(default_factory=list)
    now: datetime | None = None


def granted(pool: str, lease: Lease) -> Granted:
    waited = 0.0
    if lease.queued_at is not None:
        waited = (lease.granted_at - lease.queued_at).total_seconds()
    return Granted(
        lease=lease.id,
        pool=pool,
        device=lease.device,
        holder=lease.holder,
        granted_at=lease.granted_at,
        expires_at=lease.expires_at,
        waited_seconds=waited,
    )


def ended_answer(ended: Ended) -> LeaseAnswer:
    return LeaseAnswer(ended=ended.refusal or ended.reason.value, message=ended_message(ended))


def ended_message(ended: Ended) -> str:
    """One line: `lease L on D ended at T: IdleTimeout (...)`; an ask answered instead of a
    lease (`Refused`, `NotGranted`): the pool's words alone."""
    if ended.refusal and ended.message:
        return ended.message
    what = f"lease {ended.id} on {ended.device}" if ended.device else f"ticket {ended.ticket}"
    said = f"{what} ended at {ended.at.isoformat()}: {ended.reason.value}"
    return f"{said} ({ended.message})" if ended.message else said
