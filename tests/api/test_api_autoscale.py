"""Demand scaling's fields on their own (`AutoscaleSpec`, `ScheduleWindow`): their defaults,
their JSON, and one line naming the field for each bad input. The specs that carry them:
tests/api/test_api_autoscale_spec.py."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from devicepool.api import format_validation_error
from devicepool.api.autoscale import (
    MAX_WINDOWS,
    AutoscaleSpec,
    ScheduleWindow,
    schedule_problems,
)
from devicepool.api.problems import problem_line
from devicepool.api.v1beta1 import MAX_REPLICAS


def problems(model: type[pydantic.BaseModel], prefix: str, **fields: Any) -> list[str]:
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate(fields)
    return format_validation_error(info.value, prefix=prefix)


def test_autoscale_defaults_and_json() -> None:
    spec = AutoscaleSpec.model_validate({"maxReplicas": 80})
    assert (spec.min_replicas, spec.max_replicas, spec.idle_buffer) == (0, 80, 0)
    assert (spec.scale_down_after, spec.stabilization) == (300, 300)
    assert spec.to_json_dict() == {
        "minReplicas": 0,
        "maxReplicas": 80,
        "idleBuffer": 0,
        "scaleDownAfter": "5m",
        "stabilization": "5m",
    }
    assert AutoscaleSpec.model_validate(spec.to_json_dict()) == spec


def test_a_schedule_window_in_a_stated_zone_round_trips() -> None:
    window = ScheduleWindow.model_validate(
        {"cron": "0 18 * * fri", "duration": "54h", "minReplicas": 60, "timeZone": "Europe/Berlin"}
    )
    assert (window.duration, window.min_replicas, window.time_zone) == (
        54 * 3600,
        60,
        "Europe/Berlin",
    )
    assert window.to_json_dict() == {
        "cron": "0 18 * * fri",
        "duration": "54h",
        "minReplicas": 60,
        "timeZone": "Europe/Berlin",
    }
    utc = ScheduleWindow.model_validate({"cron": "0 9 * * *", "duration": "8h", "minReplicas": 1})
    assert utc.time_zone == "UTC"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "spec.autoscale.maxReplicas: required"),
        ({"maxReplicas": 0}, "spec.autoscale.maxReplicas: must be >= 1, got 0"),
        (
            {"maxReplicas": MAX_REPLICAS + 1},
            f"spec.autoscale.maxReplicas: must be <= {MAX_REPLICAS}, got {MAX_REPLICAS + 1}",
        ),
        (
            {"maxReplicas": "8"},
            "spec.autoscale.maxReplicas: must be an integer, got '8'"
            " (a quoted number is a string: write 8)",
        ),
        ({"maxReplicas": 8, "minReplicas": -1}, "spec.autoscale.minReplicas: must be >= 0, got -1"),
        (
            {"maxReplicas": 8, "minReplicas": 9},
            "spec.autoscale.minReplicas: must be <= maxReplicas (8), got 9",
        ),
        ({"maxReplicas": 8, "idleBuffer": -2}, "spec.autoscale.idleBuffer: must be >= 0, got -2"),
        (
            {"maxReplicas": 8, "idleBuffer": MAX_REPLICAS + 1},
            f"spec.autoscale.idleBuffer: must be <= {MAX_REPLICAS}, got {MAX_REPLICAS + 1}",
        ),
        (
            {"maxReplicas": 8, "scaleDownAfter": 300},
            "spec.autoscale.scaleDownAfter: must be a duration such as '90s', '3m' or '1h30m'"
            " (a number has no unit), got 300",
        ),
        (
            {"maxReplicas": 8, "stabilization": "soon"},
            "spec.autoscale.stabilization: must be a duration such as '90s', '3m' or '1h30m',"
            " got 'soon'",
        ),
        (
            {"maxReplicas": 8, "stabilisation": "5m"},
            "spec.autoscale.stabilisation: unknown field (did you mean 'stabilization'?)",
        ),
    ],
)
def test_a_bad_autoscale_field_is_one_line_naming_it(fields: dict[str, Any], message: str) -> None:
    assert problems(AutoscaleSpec, "spec.autoscale.", **fields) == [message]


GOOD_WINDOW = {"cron": "0 18 * * fri", "duration": "54h", "minReplicas": 60}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "at six"}, "spec.schedule[0].cron: must be a cron expression such as"),
        ({"cron": "0 0 30 2 *"}, "spec.schedule[0].cron: must be a cron expression such as"),
        ({"cron": 18}, "spec.schedule[0].cron: must be a cron expression such as"),
        ({"duration": "0s"}, "spec.schedule[0].duration: must be > 0.0, got 0.0"),
        ({"duration": "2d"}, "spec.schedule[0].duration: must be a duration such as"),
        ({"minReplicas": -1}, "spec.schedule[0].minReplicas: must be >= 0, got -1"),
        (
            {"minReplicas": MAX_REPLICAS + 1},
            f"spec.schedule[0].minReplicas: must be <= {MAX_REPLICAS}",
        ),
        ({"minReplicas": 6.0}, "spec.schedule[0].minReplicas: must be an integer, got 6.0"),
        (
            {"timeZone": "Europe/Berln"},
            "spec.schedule[0].timeZone: must be an IANA time zone such as 'Europe/Berlin' or"
            " 'UTC', got 'Europe/Berln'",
        ),
        ({"timeZone": "CEST"}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        ({"timeZone": "Factory"}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        # The worker's own zone (whichever host runs it) is no stated zone.
        ({"timeZone": "localtime"}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        ({"timeZone": "../../etc/passwd"}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        ({"timeZone": ""}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        ({"timeZone": 1}, "spec.schedule[0].timeZone: must be an IANA time zone"),
        ({"zone": "UTC"}, "spec.schedule[0].zone: unknown field"),
    ],
)
def test_a_bad_schedule_window_is_one_line_naming_its_field(
    fields: dict[str, Any], message: str
) -> None:
    [line] = problems(ScheduleWindow, "spec.schedule[0].", **{**GOOD_WINDOW, **fields})
    assert line.startswith(message), line


@pytest.mark.parametrize("missing", ["cron", "duration", "minReplicas"])
def test_a_schedule_window_needs_its_three_fields(missing: str) -> None:
    fields = {k: v for k, v in GOOD_WINDOW.items() if k != missing}
    assert problems(ScheduleWindow, "spec.schedule[0].", **fields) == [
        f"spec.schedule[0].{missing}: required"
    ]


def test_a_schedule_is_bounded_and_its_floors_stay_within_max() -> None:
    window = ScheduleWindow.model_validate(GOOD_WINDOW)
    autoscale = AutoscaleSpec.model_validate({"maxReplicas": 80})
    assert schedule_problems(autoscale, [window]) == []
    assert schedule_problems(None, []) == []

    over = window.model_copy(update={"min_replicas": 81})
    found = schedule_problems(autoscale, [window, over])
    assert [problem_line("f.yaml: ", ("spec", *loc), rule) for loc, rule in found] == [
        "f.yaml: spec.schedule[1].minReplicas: must be <= autoscale.maxReplicas (80), got 81"
    ]
    assert schedule_problems(None, [window]) == [
        (("schedule",), "needs autoscale: a window raises the autoscaler's floor")
    ]
    assert schedule_problems(autoscale, [window] * (MAX_WINDOWS + 1)) == [
        (("schedule",), f"at most {MAX_WINDOWS} windows, got {MAX_WINDOWS + 1}")
    ]
