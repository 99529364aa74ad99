"""Demand scaling's fields: `AutoscaleSpec` (the bounds of a pool that sizes itself) and the
campaign `ScheduleWindow`s that raise its floor for a while.

Fields of both kinds' v1beta1 spec (`spec.autoscale`, `spec.schedule`); the decisions they
drive are `workflows/reconciler/demand.py`, wired into the pass by
`workflows/reconciler/autoscaling.py`; docs/leases.md ('Sizing a pool from its demand') says
how they fit. Durations, counts and cron expressions are read as everywhere
else in v1beta1 (`Duration`, `Count`, a disruption budget's cron); bad input is one line
naming the field.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from devicepool.api.base import CamelModel

# `_cron` is v1beta1's own reading of a cron expression (a disruption budget's): one rule for
# every cron a pool is given.
from devicepool.api.fields import Duration, _cron
from devicepool.api.problems import Loc, show_value
from devicepool.api.v1alpha1 import MAX_REPLICAS, Count

__all__ = [
    "DEFAULT_TIME_ZONE",
    "MAX_WINDOWS",
    "AutoscaleSpec",
    "ScheduleWindow",
    "check_schedule",
    "replicas_if_autoscaled",
    "schedule_problems",
]

DEFAULT_TIME_ZONE = "UTC"
# Each pass reads every window's cron twice (the last start, the next): a bounded list keeps a
# pass cheap whatever a manifest holds. Campaigns are a handful a week.
MAX_WINDOWS = 20

_ZONE_EXAMPLE = "an IANA time zone such as 'Europe/Berlin' or 'UTC'"


# Names in the tz database that are no place: `localtime` is whatever the worker's host says
# (two workers could disagree), `posixrules` and `Factory` are the database's own plumbing;
# `posix/` and `right/` are copies of the others (the latter counting leap seconds).
_NO_PLACE = frozenset({"localtime", "posixrules", "Factory"})


def _known_zone(name: str) -> bool:
    # One zone looked up (the system's database, or the `tzdata` package's), not the whole
    # database listed: a pool's input is decoded inside the workflow sandbox, where walking
    # the database's directories finds nothing (every zone was then refused, and the pool's
    # first workflow task failed for good).
    if name in _NO_PLACE or name.startswith(("posix/", "right/")):
        return False
    try:
        zoneinfo.ZoneInfo(name)
    except (ValueError, KeyError, OSError):  # not a key, not found (a KeyError), a directory
        return False
    return True


def _time_zone(value: Any) -> Any:
    # UTC is known without a tz database (the decisions read it as `datetime.UTC`).
    if not isinstance(value, str) or (value != "UTC" and not _known_zone(value)):
        raise ValueError(f"must be {_ZONE_EXAMPLE}, got {show_value(value)}")
    return value


Cron = Annotated[str, BeforeValidator(_cron)]
TimeZone = Annotated[str, BeforeValidator(_time_zone)]


class AutoscaleSpec(CamelModel):
    """While set, the autoscaler owns the pool's size, as an HPA owns `replicas`.

    The size is `leased + queued tickets + idleBuffer`, raised to the floor (`minReplicas`, or
    a schedule window's while one is in force) and held to `maxReplicas`; a scale-down takes
    only devices unleased for `scaleDownAfter`, and not below the highest size wanted within
    `stabilization`. `minReplicas: 0` lets an idle pool go to zero: a lease asked of it then
    waits as a ticket, and the ticket makes the pool grow.
    """

    # At least 1: a pool that may never hold a device would queue every lease for nothing.
    max_replicas: Count = Field(ge=1, le=MAX_REPLICAS)
    # After `maxReplicas`, so that its check can read it and name this field.
    min_replicas: Count = Field(default=0, ge=0, le=MAX_REPLICAS)
    # Devices kept free on top of demand, so the next lease is granted at once.
    idle_buffer: Count = Field(default=0, ge=0, le=MAX_REPLICAS)
    scale_down_after: Duration = Field(default=300.0, ge=0)
    stabilization: Duration = Field(default=300.0, ge=0)

    @field_validator("min_replicas")
    @classmethod
    def _min_within_max(cls, value: int, info: ValidationInfo) -> int:
        most = info.data.get("max_replicas")  # absent: its own error is reported
        if most is not None and value > most:
            raise ValueError(f"must be <= maxReplicas ({most}), got {value}")
        return value


class ScheduleWindow(CamelModel):
    """A campaign window: from each time `cron` fires, read in `timeZone`, for `duration`,
    the pool holds at least `minReplicas` (on top of demand, within `maxReplicas`).

    The cron is read as a disruption budget's is; a wall-clock time skipped by a daylight-saving
    change fires at the first minute after the gap, and one repeated fires once. `duration` is
    elapsed time, not wall-clock: a 54h window opened on the Friday before the clocks go back
    closes at 23:00 local on Sunday, not midnight.
    """

    cron: Cron
    duration: Duration = Field(gt=0)
    min_replicas: Count = Field(ge=0, le=MAX_REPLICAS)
    time_zone: TimeZone = DEFAULT_TIME_ZONE


def schedule_problems(
    autoscale: AutoscaleSpec | None, schedule: Sequence[ScheduleWindow]
) -> list[tuple[Loc, str]]:
    """What is wrong with `schedule` beside `autoscale`, as (location under `spec`, rule).

    For the spec's own validation (`check_schedule`): a window needs the autoscaler
    (nothing else would act on its floor), a floor above `maxReplicas` could never be reached,
    and the list is bounded (`MAX_WINDOWS`)."""
    if not schedule:
        return []
    if autoscale is None:
        return [(("schedule",), "needs autoscale: a window raises the autoscaler's floor")]
    if len(schedule) > MAX_WINDOWS:
        return [(("schedule",), f"at most {MAX_WINDOWS} windows, got {len(schedule)}")]
    return [
        (
            ("schedule", index, "minReplicas"),
            f"must be <= autoscale.maxReplicas ({autoscale.max_replicas}),"
            f" got {window.min_replicas}",
        )
        for index, window in enumerate(schedule)
        if window.min_replicas > autoscale.max_replicas
    ]


def replicas_if_autoscaled(data: Any) -> Any:
    """A spec's `replicas` may be left out beside `autoscale` (the autoscaler owns the size,
    as an HPA owns a Deployment's): read as `minReplicas` until the pool's first pass sizes
    it. Not 0: a worker from before `autoscale` ignores the field and keeps `replicas`, and
    the floor the manifest states is what such a worker should hold, not nothing."""
    if isinstance(data, dict) and data.get("autoscale") is not None and "replicas" not in data:
        return {**data, "replicas": _min_replicas(data["autoscale"])}
    return data


def _min_replicas(autoscale: Any) -> int:
    if isinstance(autoscale, AutoscaleSpec):
        return autoscale.min_replicas
    if isinstance(autoscale, dict):
        value = autoscale.get("minReplicas", autoscale.get("min_replicas", 0))
        # A bad one is refused by its own field's check; 0 stands in meanwhile.
        if type(value) is int and 0 <= value <= MAX_REPLICAS:
            return value
    return 0


def check_schedule(
    autoscale: AutoscaleSpec | None, schedule: Sequence[ScheduleWindow] | None, *, title: str
) -> None:
    """A spec's `schedule` beside its `autoscale` (`schedule_problems`): each problem an error
    at its own field (`schedule[0].minReplicas`), as a field's own check would say it."""
    problems = schedule_problems(autoscale, schedule or ())
    if problems:
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(
                    type=PydanticCustomError("value_error", rule),
                    loc=loc,
                    input=_at(schedule, loc),
                )
                for loc, rule in problems
            ],
        )


def _at(schedule: Sequence[ScheduleWindow] | None, loc: Loc) -> Any:
    # The value the rule is about, for the error's `input`.
    if len(loc) == 3 and schedule is not None and isinstance(loc[1], int):
        return schedule[loc[1]].min_replicas
    return None if schedule is None else [w.to_json_dict() for w in schedule]
