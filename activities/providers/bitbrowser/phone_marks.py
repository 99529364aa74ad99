"""A cloud phone's membership as devicepool writes it into the profile: marks and `Remark`.

Pure (no I/O). `name` is the slot's mark, `dvp-<pool digest>-<slot digest>` (in
reserve `dvp-<pool digest>-reserve`, retired `dvr-<pool digest>-retired`: outside
every listing's filter); `remark` holds the state, the incarnation, its start and the
device's labels. Device ids are `<phone id>.<incarnation>`. Why: docs/providers.md,
"The cloud-phone adapter".
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote

from devicepool.activities.errors import InvalidArgumentError
from devicepool.activities.providers.bitbrowser.phones import MAX_PHONE_REMARK
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_POOL

__all__ = [
    "ACTIVE",
    "MARK_PREFIX",
    "RESERVE",
    "RETIRED",
    "Remark",
    "device_id",
    "parked_fields",
    "parked_mark",
    "parse_device_id",
    "pool_prefix",
    "slot_mark",
]

ACTIVE, RESERVE, RETIRED = "active", "reserve", "retired"
STATES = (ACTIVE, RESERVE, RETIRED)
MARK_PREFIX = "dvp-"
# A retired profile's name: nothing of `MARK_PREFIX`, so no listing of devicepool's reads it.
RETIRED_PREFIX = "dvr-"
REMARK_HEAD = "devicepool/1"
_OWN = ("dp.state", "dp.inc", "dp.at")
# A count as devicepool writes it: ASCII digits (`"²".isdigit()` is true, `int("²")` fails),
# few enough that `int()` takes them.
_COUNT = re.compile(r"[0-9]{1,12}")
# How far ahead of the reader's clock a remark's start may be (the node's clock stepped
# back since it wrote it). Further ahead, taken as when the reader first saw it.
_START_AHEAD = 300.0


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def pool_prefix(pool: str) -> str:
    """What every profile of `pool` has its `name` start with (13 characters)."""
    return f"{MARK_PREFIX}{_digest(pool, 8)}-"


def slot_mark(pool: str, idempotency_key: str) -> str:
    """The `name` of the profile serving the slot whose creates carry `idempotency_key`."""
    return pool_prefix(pool) + _digest(idempotency_key, 16)


def parked_mark(pool: str, state: str) -> str:
    """The `name` of a profile of `pool` not serving (`reserve`, `retired`: outside the
    pool's prefix, so its listings never read it again)."""
    if state == RETIRED:
        return f"{RETIRED_PREFIX}{_digest(pool, 8)}-{RETIRED}"
    return pool_prefix(pool) + state


def parked_fields(remark: Remark, state: str) -> dict[str, str]:
    """The `name` and `remark` of the remark's profile parked in `state` (a partial update)."""
    return {"name": parked_mark(remark.pool, state), "remark": replace(remark, state=state).text()}


def device_id(phone_id: str, incarnation: int) -> str:
    return f"{phone_id}.{incarnation}"


def parse_device_id(value: str) -> tuple[str, int] | None:
    """(phone id, incarnation) of a device id of this adapter; None for anything else."""
    phone_id, dot, incarnation = value.rpartition(".")
    if not dot or not phone_id or not _COUNT.fullmatch(incarnation):
        return None
    return phone_id, int(incarnation)


@dataclass(frozen=True)
class Remark:
    """A profile's `remark`: `devicepool/1 dp.state=active dp.inc=2 dp.at=<epoch> <label>=<v> ...`.

    Values are percent-encoded, so a label value with a space or `=` survives.
    """

    state: str
    incarnation: int
    started: float
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def pool(self) -> str:
        return self.labels.get(LABEL_POOL, "")

    def serves(self, incarnation: int) -> bool:
        """The profile serves device `<phone id>.<incarnation>` now."""
        return self.state == ACTIVE and self.incarnation == incarnation

    def text(self) -> str:
        own = (self.state, str(self.incarnation), str(int(self.started)))
        parts = [REMARK_HEAD, *(f"{k}={v}" for k, v in zip(_OWN, own, strict=True))]
        parts += [f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in self.labels.items()]
        text = " ".join(parts)
        if len(text) > MAX_PHONE_REMARK:
            raise InvalidArgumentError(
                ErrorType.INVALID_ARGUMENT,
                None,
                f"the device's labels do not fit a cloud phone's remark ({MAX_PHONE_REMARK} chars)",
            )
        return text

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        now: float | None = None,
        first_seen: Callable[[int], float] | None = None,
    ) -> Remark | None:
        """The remark devicepool wrote, or None for any other (another tool's, or one
        edited by hand: `dp.at=nan`). Never raises: one odd profile must not blind a
        listing of the pool or of the account.

        A start more than a few minutes after `now` (the wall clock) is taken as
        `first_seen(start)` (default `now`), and ages from there, not as foreign: a
        profile named like the pool's and unseen would bill unmanaged. Why neither as
        written nor as 0: docs/providers.md, "The cloud-phone adapter"."""
        head, *tokens = text.split() or [""]
        if head != REMARK_HEAD:
            return None
        values: dict[str, str] = {}
        for token in tokens:
            key, eq, value = token.partition("=")
            if eq:
                values[unquote(key)] = unquote(value)
        state, inc, at = (values.pop(k, "") for k in _OWN)
        if state not in STATES or not _COUNT.fullmatch(inc) or not _COUNT.fullmatch(at):
            return None
        written = int(at)
        wall = time.time() if now is None else now
        started = float(written)
        if written > wall + _START_AHEAD:
            started = wall if first_seen is None else first_seen(written)
        return cls(state=state, incarnation=int(inc), started=started, labels=values)
