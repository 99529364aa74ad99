"""Conditions, in the Kubernetes shape, as every kind's status holds them, and the Web UI
details' Markdown both kinds write of them. Pure.

`lastTransitionTime` moves only when a status flips; setting what is there changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from devicepool.api.browserpool.v1beta1 import BrowserConditionType, BrowserPoolStatus
from devicepool.api.v1beta1 import Condition, ConditionStatus, ConditionType, DevicePoolStatus

__all__ = [
    "AnyStatus",
    "ConditionUpdate",
    "condition_lines",
    "drop_condition",
    "figure_block",
    "set_condition",
]


@dataclass(frozen=True)
class ConditionUpdate:
    type: ConditionType | BrowserConditionType
    status: ConditionStatus
    reason: str
    message: str = ""


# Either kind's status: they hold conditions alike.
AnyStatus = TypeVar("AnyStatus", DevicePoolStatus, BrowserPoolStatus)


def set_condition(
    status: AnyStatus, cond: ConditionUpdate, *, now: datetime, generation: int
) -> AnyStatus:
    old = status.condition(cond.type)
    if old and (old.status, old.reason, old.message) == (cond.status, cond.reason, cond.message):
        return status
    new = Condition(
        type=cond.type,
        status=cond.status,
        reason=cond.reason,
        message=cond.message,
        last_transition_time=old.last_transition_time if old and old.status == cond.status else now,
        observed_generation=generation,
    )
    others: list[Condition] = [c for c in status.conditions if c.type != cond.type]
    return status.model_copy(update={"conditions": sorted([*others, new], key=lambda c: c.type)})


def drop_condition(status: AnyStatus, type_: ConditionType | BrowserConditionType) -> AnyStatus:
    if status.condition(type_) is None:
        return status
    return status.model_copy(
        update={"conditions": [c for c in status.conditions if c.type != type_]}
    )


def figure_block(rows: list[tuple[str, Any]]) -> list[str]:
    """Figures as an aligned code block: the Web UI's Markdown has no tables (one ran
    together into `phasedesiredready...`)."""
    width = max(len(label) for label, _ in rows) + 2
    return ["```", *(f"{label:<{width}}{value}" for label, value in rows), "```"]


def condition_lines(conditions: Iterable[Condition]) -> list[str]:
    """Conditions as a Markdown list, one line each."""
    return [
        f"- **{c.type}** {c.status.value} · {c.reason}" + (f": {c.message}" if c.message else "")
        for c in conditions
    ]
