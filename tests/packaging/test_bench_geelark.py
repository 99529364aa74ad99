"""bench/geelark.py's arithmetic: the bound it compares with, the device-minutes it integrates,
the worker's calls it reads (no server: the bench itself runs in `make bench`)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.bench import load_bench

geelark = load_bench("geelark")


@pytest.mark.parametrize(
    ("n", "creates", "boot", "ledger", "pacer", "total"),
    [
        # 100 phones at 20 creates a minute: the 100th create in the fifth window.
        (100, 20, 20.0, 4 * 61.0, 0.0, 264.0),
        # All in the first window: the boot alone.
        (20, 20, 20.0, 0.0, 0.0, 20.0),
        (21, 20, 20.0, 61.0, 0.0, 81.0),
        # More creates a minute than the API takes requests an endpoint: the pacer binds.
        (401, 1000, 20.0, 0.0, 2 * 61.0, 142.0),
        (1, 20, 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_the_bound_takes_the_limit_that_binds(
    n: int, creates: int, boot: float, ledger: float, pacer: float, total: float
) -> None:
    bound = geelark.Bound(n, creates, boot)
    assert (bound.ledger, bound.pacer, bound.total) == (ledger, pacer, total)
    assert f"= {total:g} s" in bound.formula()


def test_the_meter_holds_each_value_until_the_next_look() -> None:
    meter = geelark.Meter()
    meter.sample(10.0, 3)  # the first look counts nothing before it
    meter.sample(12.0, 5)  # 3 for 2 s
    mark = meter.total
    meter.sample(13.0, 0)  # 5 for 1 s
    meter.sample(11.0, 7)  # a look back in time adds nothing
    assert (mark, meter.total, meter.since(mark)) == (6.0, 11.0, 5.0)


def test_the_workers_calls_are_read_by_endpoint() -> None:
    scrape = "\n".join(
        [
            "# TYPE devicepool_api_requests_total counter",
            'devicepool_api_requests_total{operation="POST /open/v1/phone/list"} 378.0',
            'devicepool_api_requests_total{operation="POST /open/v1/phone/addNew"} 1e+02',
            'devicepool_api_requests_created{operation="POST /open/v1/phone/list"} 1.79e+09',
            'devicepool_api_requests_total{operation="GET /api/v1/devices"} 4.0',
        ]
    )
    calls = geelark.calls_by_endpoint(scrape)
    assert calls == {"phone/list": 378, "phone/addNew": 100}
    assert geelark.by_endpoint(calls) == "list 378, addNew 100"


@pytest.mark.parametrize(
    ("now", "moved"),
    [
        ("2026-12-05T23:59:00.000Z", 61.0),  # the run would cross midnight: moved past it
        ("2026-12-05T12:00:00.000Z", None),  # room enough before midnight
    ],
)
async def test_a_run_never_straddles_a_utc_midnight(now: str, moved: float | None) -> None:
    asked: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            asked.append(json.loads(request.content)["advanceSeconds"])
        return httpx.Response(200, json={"now": now, "speed": 4})

    async with httpx.AsyncClient(
        transport=httpx.MockTransport(answer), base_url="http://emulator"
    ) as http:
        await geelark.clear_of_midnight(http, room=1400)
    assert asked == ([] if moved is None else [moved])
