"""A pool's own events, as `kubectl describe` shows them: a bounded ring in the carried
state, so recording one is never a command. A repeat back to back is counted on the last
one, as Kubernetes aggregates repeats. Pure: `now` comes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from devicepool.api.base import CamelModel

__all__ = ["LIMIT", "EventType", "Happened", "PoolEvent", "PoolEvents", "record"]

# Enough for "what happened lately", small enough to carry in every hand-over.
LIMIT = 20
# A `similar` event is counted on one of its reason among the last this many.
SIMILAR_WITHIN = 5
COMBINED = "(combined from similar events): "
# A message longer than this is cut (a provider's error text can be long).
MESSAGE_CHARS = 240


@dataclass(frozen=True)
class Happened:
    """One thing worth an event, before it is recorded (`record`) at a time."""

    reason: str
    message: str = ""
    warning: bool = False
    # One of many alike (a lease granted, released): counted on the recent event of its
    # reason, whatever its message, so a busy pool's leases do not push the rest out.
    similar: bool = False


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class PoolEvent(CamelModel):
    time: datetime
    type: EventType = EventType.NORMAL
    # CamelCase, one word: Scaled, Creating, Replaced, RemediationPaused, BackOff, ...
    reason: str
    message: str = ""
    # how many times in a row it happened; `first_time` is when the first did
    count: int = 1
    first_time: datetime | None = None


class PoolEvents(CamelModel):
    """Query `events`: the pool's recent events, oldest first."""

    events: list[PoolEvent] = Field(default_factory=list)


def record(
    events: list[PoolEvent],
    *,
    now: datetime,
    reason: str,
    message: str = "",
    warning: bool = False,
    limit: int = LIMIT,
    similar: bool = False,
) -> list[PoolEvent]:
    """`events` with this one added (or counted on the last one if it repeats), newest last."""
    type_ = EventType.WARNING if warning else EventType.NORMAL
    message = _short(message)
    if similar:
        alike = next(
            (
                i
                for i in range(len(events) - 1, max(-1, len(events) - 1 - SIMILAR_WITHIN), -1)
                if (events[i].type, events[i].reason) == (type_, reason)
            ),
            None,
        )
        if alike is not None:  # as Kubernetes combines similar events
            old = events[alike]
            combined = old.model_copy(
                update={
                    "time": now,
                    "count": old.count + 1,
                    "first_time": old.first_time or old.time,
                    "message": _short(f"{COMBINED}{message}"),
                }
            )
            return [*events[:alike], *events[alike + 1 :], combined]
    last = events[-1] if events else None
    if last is not None and (last.type, last.reason, last.message) == (type_, reason, message):
        repeated = last.model_copy(
            update={
                "time": now,
                "count": last.count + 1,
                "first_time": last.first_time or last.time,
            }
        )
        return [*events[:-1], repeated]
    event = PoolEvent(time=now, type=type_, reason=reason, message=message)
    return [*events, event][-limit:]


def _short(message: str) -> str:
    if len(message) <= MESSAGE_CHARS:
        return message
    return message[: MESSAGE_CHARS - 1] + "…"
