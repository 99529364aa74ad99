"""Field types v1beta1 and the autoscale fields share: durations and cron expressions.

Apart from `v1beta1` so that `api.autoscale` can use them while `v1beta1` uses it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from devicepool.api.durations import format_duration, parse_duration
from devicepool.api.problems import show_value

__all__ = ["Duration", "WholeSecondsDuration", "_cron", "_seconds"]


def _seconds(value: Any) -> float:
    # Python callers may pass a timedelta; manifests and payloads carry the string.
    if isinstance(value, timedelta):
        return value.total_seconds()
    return parse_duration(value)


def _whole_seconds(value: Any) -> int:
    seconds = _seconds(value)
    if seconds != int(seconds):
        raise ValueError(f"must be whole seconds, got {show_value(value)}")
    return int(seconds)


# Seconds in Python, a duration string (`3m`) in JSON and YAML.
Duration = Annotated[
    float, BeforeValidator(_seconds), PlainSerializer(format_duration, return_type=str)
]
WholeSecondsDuration = Annotated[
    int, BeforeValidator(_whole_seconds), PlainSerializer(format_duration, return_type=str)
]


def _cron(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(
            f"must be a cron expression such as '0 9 * * mon-fri', got {show_value(value)}"
        )
    from cronsim import CronSim, CronSimError

    try:
        CronSim(value, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as err:
        raise ValueError(
            f"must be a cron expression such as '0 9 * * mon-fri' ({err}), got {show_value(value)}"
        ) from None
    return value
