"""A quota refusal tells the engine which quota and when it resets (issue 41).

`to_application_error` carries `quota` and `resetsAt` in the failure's details for any
provider's `QuotaExceededError`: GeeLark's daily quotas name their UTC midnight, its
profile cap none; the REST contract's 402 may carry both as problem+json members.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devicepool.activities.errors import (
    QuotaExceededError,
    error_from_response,
    to_application_error,
)
from devicepool.activities.providers.geelark.errors import error_for
from tests.activities.test_geelark_contract import _new, _provider
from tests.helpers.geelark import team

NOW = datetime(2026, 12, 6, 13, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("code", "quota", "resets"),
    [
        (44004, "DailyCreateQuota", "2026-12-07T00:00:00Z"),
        (43008, "DailyOpenQuota", "2026-12-07T00:00:00Z"),
        (44002, "ProfileCap", None),
    ],
)
def test_a_geelark_quota_refusal_names_its_quota_and_reset(
    code: int, quota: str, resets: str | None
) -> None:
    failure = to_application_error(error_for("POST /open/v1/phone/addNew", code, "", now=NOW))
    assert failure.type == "quota_exceeded" and failure.non_retryable
    assert failure.details[0]["quota"] == quota
    assert failure.details[0]["resetsAt"] == resets


def test_a_rest_quota_refusal_may_carry_its_reset() -> None:
    body = {
        "code": "quota_exceeded",
        "detail": "daily creates used",
        "quota": "DailyCreateQuota",
        "resetsAt": "2026-12-07T00:00:00Z",
    }
    error = error_from_response(402, body)
    assert isinstance(error, QuotaExceededError)
    assert error.resets_at == datetime(2026, 12, 7, tzinfo=UTC)
    details = to_application_error(error).details[0]
    assert details["quota"] == "DailyCreateQuota"
    assert details["resetsAt"] == "2026-12-07T00:00:00Z"


@pytest.mark.parametrize(
    "hostile",
    [{"resetsAt": "soon", "quota": "x" * 200}, {"resetsAt": "2026-12-07T00:00:00", "quota": 3},
     {"resetsAt": 1e20, "quota": "Daily Quota; rm"}],
)  # fmt: skip
def test_a_reset_or_quota_name_that_is_not_one_is_dropped(hostile: dict[str, object]) -> None:
    error = error_from_response(402, {"code": "quota_exceeded", **hostile})
    details = to_application_error(error).details[0]
    assert details["resetsAt"] is None and details["quota"] is None


def test_other_errors_keep_their_details() -> None:
    details = to_application_error(error_from_response(404, {"code": "not_found"})).details[0]
    assert details == {"status": 404, "retryAfter": None}


@pytest.mark.parametrize(
    ("limits", "quota"),
    [({"creates_per_day": 1}, "DailyCreateQuota"), ({"opens_per_day": 1}, "DailyOpenQuota")],
)
async def test_the_geelark_adapter_against_its_emulator_names_the_quota_and_reset(
    limits: dict[str, int], quota: str
) -> None:
    # The adapter's own refusal, from the in-process emulator, as the engine receives it.
    async with team(**limits) as t:
        provider = _provider(t)
        await provider.create_device(_new("slot-1"))
        with pytest.raises(QuotaExceededError) as caught:
            await provider.create_device(_new("slot-2"))
        details = to_application_error(caught.value).details[0]
        assert details["quota"] == quota
        resets = datetime.fromisoformat(details["resetsAt"])
        assert (resets.hour, resets.minute, resets.second) == (0, 0, 0)
        assert resets > datetime.now(UTC)
        await provider.aclose()
