"""A pool's row in its memo: what `get`'s table and the worker's gauges read of a pool, so that
one List call answers for every pool instead of a `status` query each.

Pure (no Temporal). The shell writes the row (`Reconciler.show_row`) only when it differs from
the memo, so nothing in it may change with time alone: no ages, no "seconds since", no cost
accrued by the minute (the oldest lease ticket is its creation and deadline, counted at read
time). Counts, never lists: a pool of 500 devices writes the row a pool of 5 does. Why:
docs/scaling.md, 'What Temporal and the provider see'."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "MAX_ROW_BYTES",
    "ROW_VERSION",
    "LeaseFacts",
    "Row",
    "pool_row",
    "read_row",
    "table_figures",
]

# A reader takes only the version it knows; another (a newer build's) is read as no row.
ROW_VERSION = 1
# Far under Temporal's limits (a memo is a payload: 2 MB a blob, warnings from 256 KB); a
# row over it drops `byNode`, then the conditions, and says it is partial (read by a query).
MAX_ROW_BYTES = 2048

# The largest integer a JSON reader (a float) holds exactly: a count or amount past it in a
# row is not trusted.
MAX_EXACT = 2**53

# The status fields the row carries (camelCase, both kinds): counts and words.
COUNT_FIELDS = (
    "desiredReplicas",
    "readyDevices",
    "busyDevices",
    "provisioningDevices",
    "pendingDevices",
    "offlineDevices",
    "updatedDevices",
    "readyProfiles",
    "openProfiles",
    "lostProfiles",
    "leasedDevices",
    "leasesQueued",
    "leasesExpired",
    "observedGeneration",
)
# What the devices bill an hour now: it changes with the devices, not with the clock.
MONEY_FIELDS = ("hourlyCost",)
# Of a condition: what the table (`RollingOut`) and the gauges read; its message and
# transition time are `describe`'s.
CONDITION_FIELDS = ("type", "status", "reason")
# What either kind's `get` table reads of a row (its columns, `api.kinds`): a row write that
# moves one of these is stamped for `get -w` (`table_figures`); the rest (busy, queued and
# expired leases, the generation, the oldest ticket) may move without a stamp.
TABLE_FIELDS = (
    "desiredReplicas",
    "readyDevices",
    "leasedDevices",
    "provisioningDevices",
    "pendingDevices",
    "offlineDevices",
    "hourlyCost",
    "phase",
    "readyProfiles",
    "openProfiles",
    "lostProfiles",
    "byNode",
)


@dataclass(frozen=True)
class LeaseFacts:
    """The lease book as the status's lease fields will say it, and what the gauges read
    besides: the oldest ticket's creation and deadline, and the spec's `leases.queue.maxWait`."""

    leased: int
    queued: int
    expired: int
    oldest: tuple[datetime, datetime] | None = None
    max_wait: float | None = None


@dataclass(frozen=True)
class Row:
    """A row read back: the status fields it carries, and the rest (None: not said)."""

    status: dict[str, Any]
    created_at: datetime | None = None
    max_wait: float | None = None
    # The oldest waiting ticket: made, and its deadline (Unix seconds).
    oldest: tuple[float, float] | None = None


def pool_row(
    status: Mapping[str, Any], *, created_at: datetime | None, leases: LeaseFacts | None = None
) -> dict[str, Any]:
    """The memo row of a pool whose status (camelCase JSON) is `status`; plain JSON values
    only, so that the memo read back compares equal."""
    shown: dict[str, Any] = {}
    for key in COUNT_FIELDS:
        if _count(status.get(key)) is not None:
            shown[key] = _count(status.get(key))
    for key in MONEY_FIELDS:
        if _money(status.get(key)) is not None:
            shown[key] = _money(status.get(key))
    if isinstance(status.get("phase"), str):
        shown["phase"] = status["phase"]
    if isinstance(status.get("byNode"), Mapping):
        shown["byNode"] = {str(k): _count(v) or 0 for k, v in status["byNode"].items()}
    if isinstance(status.get("conditions"), list):
        shown["conditions"] = _conditions(status["conditions"])
    if leases is not None and "leasedDevices" in shown:
        # What `Leasing.shown` writes into the status right after a pass's publish.
        shown.update(
            leasedDevices=leases.leased, leasesQueued=leases.queued, leasesExpired=leases.expired
        )
    row: dict[str, Any] = {"v": ROW_VERSION, "status": shown}
    if created_at is not None:
        row["createdAt"] = _iso(created_at)
    if leases is not None and leases.max_wait is not None:
        row["maxWait"] = float(leases.max_wait)
    if leases is not None and leases.queued and leases.oldest is not None:
        made, deadline = leases.oldest
        row["oldestTicket"] = {"createdAt": _iso(made), "deadline": _iso(deadline)}
    return _fit(row)


def table_figures(row: Any) -> Any:
    """What `get`'s tables (either kind's) show of a memo row: two rows with the same figures
    print the same table line, so a write between them needs no `DevicePoolRowAt` stamp.
    A row a reader does not take (none, partial, another version's) is its own figure."""
    if not isinstance(row, Mapping) or row.get("v") != ROW_VERSION or row.get("partial"):
        return ("no row", row.get("v") if isinstance(row, Mapping) else None)
    said = row.get("status")
    status = said if isinstance(said, Mapping) else {}
    figures = {key: status.get(key) for key in TABLE_FIELDS}
    # PHASE's `(rollout 2/4)`: the updated count only while a rollout is under way.
    rolling = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") == "RollingOut" and c.get("status") == "True"
    ]
    figures["rollout"] = status.get("updatedDevices") if rolling else None
    figures["createdAt"] = row.get("createdAt")  # AGE
    return figures


def _fit(row: dict[str, Any]) -> dict[str, Any]:
    """`row`, or without what makes it larger than `MAX_ROW_BYTES` (then `partial`)."""
    for key in ("byNode", "conditions"):
        if _size(row) <= MAX_ROW_BYTES:
            return row
        if key in row["status"]:
            row = {**row, "status": {k: v for k, v in row["status"].items() if k != key}}
            row["partial"] = True
    return row


def _size(row: dict[str, Any]) -> int:
    return len(json.dumps(row, separators=(",", ":")).encode())


def read_row(value: Any) -> Row | None:
    """A memo row as a reader may trust it; None for no row, a partial one (the reader
    queries that pool), another version's, or anything malformed."""
    if not isinstance(value, Mapping) or value.get("v") != ROW_VERSION or value.get("partial"):
        return None
    said = value.get("status")
    if not isinstance(said, Mapping):
        return None
    status: dict[str, Any] = {}
    for key in COUNT_FIELDS:
        if (count := _count(said.get(key))) is not None:
            status[key] = count
    for key in MONEY_FIELDS:
        if (money := _money(said.get(key))) is not None:
            status[key] = money
    if isinstance(said.get("phase"), str):
        status["phase"] = said["phase"]
    if isinstance(said.get("byNode"), Mapping):
        status["byNode"] = {str(k): _count(v) or 0 for k, v in said["byNode"].items()}
    if isinstance(said.get("conditions"), list):
        status["conditions"] = _conditions(said["conditions"])
    oldest = value.get("oldestTicket")
    made = _time(oldest.get("createdAt")) if isinstance(oldest, Mapping) else None
    deadline = _time(oldest.get("deadline")) if isinstance(oldest, Mapping) else None
    max_wait = _money(value.get("maxWait"))
    return Row(
        status=status,
        created_at=_time(value.get("createdAt")),
        max_wait=max_wait if max_wait else None,
        oldest=(made.timestamp(), deadline.timestamp()) if made and deadline else None,
    )


def _conditions(conditions: list[Any]) -> list[dict[str, str]]:
    return [
        {k: str(c[k]) for k in CONDITION_FIELDS if isinstance(c.get(k), str)}
        for c in conditions
        if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    ]


def _count(value: Any) -> int | None:
    """A count of 0 or more, else None (a bool, a float, a negative, text, one past what a
    JSON number holds exactly: not a count; a gauge's float() of 10**400 would raise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_EXACT else None


def _money(value: Any) -> float | None:
    """A finite amount of 0 or more, as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and value > MAX_EXACT:
        return None  # math.isfinite(10**400) raises
    return float(value) if math.isfinite(value) and value >= 0 else None


def _iso(value: datetime) -> str:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
