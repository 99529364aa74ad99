"""What a lease call is given, checked here so that bad input never reaches the pool: the
selector, the durations, the holder, a lease id; and `Lease`, what a grant gives back."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic

from devicepool.activities.connect_models import ConnectInfo
from devicepool.api.durations import MAX_SECONDS, format_duration, parse_duration
from devicepool.api.labels import check_label_key, check_label_value
from devicepool.api.problems import show_value
from devicepool.client.errors import BadInput, DevicePoolError
from devicepool.workflows.reconciler.lease_messages import MAX_HOLDER, Granted, LeaseRequest

__all__ = [
    "Lease",
    "RoundTrip",
    "default_holder",
    "granted_lease",
    "lease_id",
    "lease_request",
    "parse_selector",
    "seconds_of",
]


@dataclass
class Lease:
    """A device held: `id` is the lease's fencing token (`renew_lease`, `release_lease`).

    `ended` is set by `PoolClient.lease`'s renewals when the pool ended the lease early
    (it expired, its device was lost): the holder should stop using the device."""

    id: str
    pool: str
    device: str
    holder: str
    granted_at: datetime
    expires_at: datetime
    # How long its ticket waited in the queue (0: granted at once).
    waited_seconds: float = 0.0
    kind: str = "DevicePool"
    ended: str | None = None
    # The client it was granted through (`connect`).
    _pools: Any = field(default=None, repr=False, compare=False)
    # The pool's clock less ours, as its grant showed it (the renewals' `left`).
    _clock: timedelta | None = field(default=None, repr=False, compare=False)

    async def connect(self) -> ConnectInfo:
        """How to reach the device (ADB login, CDP endpoint), read now by the pool: only
        through encrypted history (`PoolClient.lease_connect`)."""
        if self._pools is None:
            raise DevicePoolError(f"lease {self.id}: not granted through a PoolClient")
        return await self._pools.lease_connect(self.pool, self, kind=self.kind)

    @classmethod
    def of(cls, granted: Granted, *, kind: str) -> Lease:
        return cls(
            id=granted.lease,
            pool=granted.pool,
            device=granted.device,
            holder=granted.holder,
            granted_at=granted.granted_at,
            expires_at=granted.expires_at,
            waited_seconds=granted.waited_seconds,
            kind=kind,
        )


def default_holder(*, pid: bool = True) -> str:
    """`user@host:pid` (`user@host` without `pid`): who holds a lease when not told, as the
    `leases` HOLDER column shows it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container), no LOGNAME
        user = "user"
    said = f"{user}@{socket.gethostname()}" + (f":{os.getpid()}" if pid else "")
    return said[:MAX_HOLDER]


def parse_selector(selector: Mapping[str, str] | str | Sequence[str] | None) -> dict[str, str]:
    """`{"k": "v"}`, `"k=v,k2=v2"` or `["k=v", ...]` (the CLI's repeated `--selector`) as a
    mapping of label pairs; `BadInput` for anything that is not `k=v` with a label's key and
    value."""
    if selector is None:
        return {}
    if isinstance(selector, Mapping):
        pairs = [(str(k), v) for k, v in selector.items()]
    else:
        items = [selector] if isinstance(selector, str) else list(selector)
        pairs = []
        for item in items:
            for term in str(item).split(","):
                key, equals, value = term.strip().partition("=")
                if not equals or not key.strip():
                    raise BadInput(f"selector: must be key=value, got {show_value(term)}")
                pairs.append((key.strip(), value.strip()))
    chosen: dict[str, str] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            raise BadInput(f"selector {key}: a label value is a string, got {show_value(value)}")
        try:
            check_label_key(key)
            check_label_value(value)
        except ValueError as err:
            raise BadInput(f"selector {key}={value}: {err}") from None
        if chosen.get(key, value) != value:
            raise BadInput(f"selector: {key} given twice ({chosen[key]} and {value})")
        chosen[key] = value
    return chosen


def seconds_of(value: timedelta | float | str | None, what: str, *, zero: bool = False) -> float:
    """Seconds of a duration (a timedelta, a number of seconds, or `10m`), more than 0 (or 0
    too with `zero`); `BadInput` otherwise."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        try:
            seconds = parse_duration(value)
        except ValueError as err:
            raise BadInput(f"{what}: {err}") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise BadInput(f"{what}: must be a finite duration, got {show_value(value)}")
    if seconds < 0 or (seconds == 0 and not zero):
        least = "0s or more" if zero else "more than 0s"
        raise BadInput(f"{what}: must be {least}, got {show_value(value)}")
    if seconds > MAX_SECONDS:  # as the CLI's durations (a `timedelta` of 1e20 s overflows)
        most = format_duration(MAX_SECONDS)
        raise BadInput(f"{what}: must be at most {most}, got {show_value(value)}")
    return seconds


def lease_request(
    *,
    selector: Mapping[str, str] | str | Sequence[str] | None,
    duration: timedelta | float | str | None,
    wait: timedelta | float | str | None,
    holder: str | None,
) -> LeaseRequest:
    """The `lease` update's payload, checked here: bad input never reaches the pool."""
    chosen = parse_selector(selector)
    length = None if duration is None else timedelta(seconds=seconds_of(duration, "duration"))
    waiting = timedelta(seconds=seconds_of(wait, "wait", zero=True))
    # None or blank: who asks (a blank holder would show as no one in `leases`).
    who = default_holder() if holder is None or not holder.strip() else holder
    if len(who) > MAX_HOLDER:
        raise BadInput(f"holder: at most {MAX_HOLDER} characters, got {len(who)}")
    try:
        return LeaseRequest(selector=chosen, holder=who, duration=length, wait=waiting)
    except pydantic.ValidationError as err:  # what the checks above missed, by its field
        first = err.errors()[0]
        field_name = ".".join(str(x) for x in first["loc"]) or "lease"
        said = str(first["msg"]).removeprefix("Value error, ")
        raise BadInput(f"{field_name}: {said}, got {show_value(first['input'])}") from None


def lease_id(lease: Lease | str) -> str:
    """The id of a lease (or of a ticket), checked: `BadInput` for none."""
    some_id = lease.id if isinstance(lease, Lease) else lease
    if not isinstance(some_id, str) or not some_id.strip():
        raise BadInput(f"lease: a lease id, got {show_value(some_id)}")
    return some_id.strip()


class RoundTrip:
    """When (our clock) an update was sent and answered: the pool's now lies between."""

    def __init__(self) -> None:
        self.sent = self.answered = datetime.now(UTC)
        self.tried = False  # sent at all: from then on, the pool may apply it

    def start(self) -> None:
        """Sent (again) now: the last try is the one answered."""
        self.sent, self.tried = datetime.now(UTC), True

    def done(self) -> None:
        self.answered = datetime.now(UTC)

    def mid(self) -> datetime:
        return self.sent + (self.answered - self.sent) / 2


def granted_lease(
    pools: Any, granted: Granted, kind: str, duration: float | None, asked: RoundTrip
) -> Lease:
    """The `Lease` of a grant, with the pool's clock less ours (`_clock`) as the answer shows
    it: at a grant at once `grantedAt` is the pool's now; at a claim `expiresAt` less the
    length asked is (unless `maxDuration` cut it: then `grantedAt`, the offer, is the
    latest bound known, and a renew for more than is left is cut at the same end)."""
    lease = Lease.of(granted, kind=kind)
    lease._pools = pools
    at = granted.granted_at
    if duration is not None:
        at = max(at, granted.expires_at - timedelta(seconds=duration))
    lease._clock = at - asked.mid()
    return lease
