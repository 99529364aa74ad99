"""Conditions, in the Kubernetes shape, as every kind's status holds them. Pure.

`lastTransitionTime` moves only when a status flips; setting what is there changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from devicepool.api.browserpool.v1beta1 import BrowserConditionType, BrowserPoolStatus
from devicepool.api.v1beta1 import Condition, ConditionStatus, ConditionType, DevicePoolStatus

__all__ = ["AnyStatus", "ConditionUpdate", "drop_condition", "set_condition"]


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
