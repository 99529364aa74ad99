"""bench/demand.py's arithmetic: the seeded week of asks, the oracle, the model's waits, bills
and refusals, the goals (no server: the bench itself runs in `make bench`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.helpers.bench import load_bench

demand = load_bench("demand")
Lease = demand.Lease
# Small limits for hand-made traces: 2 creates a 61-s window, a 10-s boot.
LIMITS = demand.Limits(
    creates_per_minute=2,
    window=61.0,
    boot=10.0,
    queue_max=50,
    max_wait=300.0,
    price_per_hour=0.10,
)
NO_CAMPAIGN = (1e9, 1e9)


def _autoscale(**fields: object) -> Any:
    spec = {"max_replicas": 80, "scale_down_after": "60s", "stabilization": "0s", **fields}
    return demand.Way("autoscale", autoscale=demand.AutoscaleSpec(**spec))


def _run(way: Any, trace: list[Any], length: float, **limits: object) -> Any:
    chosen = LIMITS if not limits else demand.Limits(**{**vars(LIMITS), **limits})
    return demand.simulate(way, trace, chosen, length=length, campaign=NO_CAMPAIGN)


def test_the_week_is_the_same_for_a_seed_and_another_for_another() -> None:
    week = demand.week_trace(40)
    assert week == demand.week_trace(40)
    assert week != demand.week_trace(41)
    assert [a.at for a in week] == sorted(a.at for a in week)
    assert all(0 <= a.at < demand.WEEK and 600 <= a.hold <= 1800 for a in week)


def test_the_week_has_a_few_an_hour_then_the_campaign_at_its_peak() -> None:
    week = demand.week_trace(40)
    start, end = demand.CAMPAIGN
    weekdays = [a for a in week if a.at < start]
    hours = start / 3600
    assert 0.7 * 4 * hours < len(weekdays) < 1.3 * 4 * hours

    def held(t: float) -> int:
        return sum(1 for a in week if a.at <= t < a.at + a.hold)

    saturday_noon = start + 18 * 3600
    assert 40 <= held(saturday_noon) <= 80
    assert held(end + 3600) <= 8  # Monday: back to a few
    # The ramp: fewer asks in its first 5 minutes than in 5 minutes at the peak.
    first = sum(1 for a in week if start <= a.at < start + 300)
    later = sum(1 for a in week if start + 7200 <= a.at < start + 7500)
    assert first < later
    assert demand.mean_concurrent(week) == pytest.approx(sum(a.hold for a in week) / demand.WEEK)


def test_the_oracle_is_the_leased_hours_and_a_boot_a_lease() -> None:
    trace = [Lease(at=0, hold=600), Lease(at=10, hold=1200)]
    assert demand.oracle_hours(trace, 45) == pytest.approx((1800 + 90) / 3600)
    assert demand.most_concurrent(trace) == 2
    assert demand.most_concurrent([Lease(at=0, hold=10), Lease(at=10, hold=10)]) == 1


def test_the_limits_are_the_products_defaults() -> None:
    limits = demand.Limits.defaults()
    assert (limits.creates_per_minute, limits.window, limits.boot) == (20, 61.0, 45.0)
    assert (limits.queue_max, limits.max_wait, limits.price_per_hour) == (50, 300.0, 0.10)


def test_a_static_pool_bills_its_replicas_and_queues_past_them() -> None:
    way = demand.Way("static", replicas=1)
    out = _run(way, [Lease(at=100, hold=250), Lease(at=200, hold=600)], length=3600)
    assert out.device_hours == pytest.approx(1.0)  # one device, ready all along
    assert out.waits == [0.0, 150.0]  # the second waits for the first's give-back
    assert (out.refused, out.creates, out.most) == (0, 0, 1)


def test_a_full_queue_and_a_long_wait_are_refusals() -> None:
    way = demand.Way("none", replicas=0)
    out = _run(way, [Lease(at=0, hold=60), Lease(at=1, hold=60)], length=600, queue_max=1)
    assert (out.refused_full, out.refused_waited, out.waits) == (1, 1, [])


def test_autoscale_boots_for_a_lease_and_bills_until_its_device_goes() -> None:
    # At zero: the ask makes the pool create (a boot of 10 s: leased at 110); given back at
    # 710, the device goes once idle for scaleDownAfter (60 s): billed from 100 to 770.
    out = _run(_autoscale(), [Lease(at=100, hold=600)], length=2000)
    assert out.waits == [10.0]
    assert out.device_seconds == pytest.approx(670.0)
    assert (out.creates, out.terminations) == (1, 1)


def test_autoscale_creates_no_faster_than_the_accounts_window() -> None:
    trace = [Lease(at=0.5, hold=600) for _ in range(3)]
    out = _run(_autoscale(), trace, length=2000)
    # Two creates at 0.5, the third once the first leaves the 61-s window.
    assert out.waits == [10.0, 10.0, 71.0]


def test_stabilization_keeps_the_highest_size_wanted_within_its_window() -> None:
    # Two devices made at 100, leased at 110, idle from 720. Without stabilization they go at
    # 780; with 10 min of it, not before the size of 2 wanted until 720 ages out.
    trace = [Lease(at=100, hold=610), Lease(at=100, hold=610)]
    quick = _run(_autoscale(), trace, length=3000)
    held = _run(_autoscale(stabilization="10m"), trace, length=3000)
    assert quick.device_seconds == pytest.approx(2 * 680.0)
    # The pass at 720 (every 30 s) still saw both leased: 2 is held until 1320.
    assert held.device_seconds == pytest.approx(2 * 1220.0)


def test_the_idle_buffer_is_billed_and_spares_the_boot() -> None:
    out = _run(_autoscale(idle_buffer=1), [Lease(at=100, hold=600)], length=3600)
    assert out.waits == [0.0]  # the buffer's device, ready when the week starts
    assert out.device_hours >= 1.0  # a device free at every moment, besides


def test_a_schedule_warms_the_pool_before_its_window() -> None:
    spec = demand.autoscale_spec()
    way = demand.Way("scheduled", autoscale=spec, schedule=(demand.campaign_window(60),))
    start = demand.CAMPAIGN[0]
    model = demand.Model(way, [], demand.Limits.defaults(), length=start + 1)
    out = model.run()
    made = [d for d in model.devices.values() if d.created > 0]
    # The floor, 60, is over the buffer's 2 (there at the start): 58 made, ready in time.
    assert (len(model.devices), out.creates, len(made)) == (60, 58, 58)
    assert max(d.ready for d in made) <= start  # warm when the window opens
    # At the product's warm pace (autoscaling.WARM_*): 60 at 10 a minute, then a 2-min boot:
    # from 8 min before, at the pass that wakes for it.
    assert min(d.created for d in made) == start - 480
    assert demand.START + timedelta(seconds=start) == demand.START.replace(day=4, hour=18)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert (demand.pct(values, 0.5), demand.pct(values, 0.95)) == (10.0, 19.0)
    assert demand.pct([], 0.95) == 0.0


def test_the_goals_are_read_against_the_oracle_static_peak_and_the_boot() -> None:
    peak = demand.Outcome("static peak", device_seconds=1000 * 3600)
    plain = demand.Outcome("autoscale", device_seconds=290 * 3600, ramp_waits=[50.0, 56.0])
    scheduled = demand.Outcome(
        "autoscale + schedule", device_seconds=301 * 3600, ramp_waits=[0.0], refused_full=1
    )
    found = {g.what: g for g in demand.goals([peak, plain, scheduled], 250.0, LIMITS)}
    assert len(found) == 8
    assert found["autoscale: device-hours <= 1.3x the oracle"].met  # 290 <= 325
    assert found["autoscale: device-hours <= 0.3x static peak"].met  # 290 <= 300
    assert not found["autoscale: ramp wait p95 (s) <= the boot 10 s + 10 s"].met  # 56 > 20
    assert not found["autoscale + schedule: device-hours <= 0.3x static peak"].met
    assert found["autoscale + schedule: ramp wait p95 (s) <= 5 s"].met
    assert not found["autoscale + schedule: leases refused <= 0"].met
    assert "NOT MET" in found["autoscale + schedule: leases refused <= 0"].line()


def test_the_ways_are_static_peak_and_average_and_autoscale_with_and_without_a_window() -> None:
    week = demand.week_trace(40)
    ways = demand.four_ways(week, 60)
    assert [w.replicas for w in ways[:2]] == [80, int(-(-demand.mean_concurrent(week) // 1))]
    assert ways[2].autoscale is not None and not ways[2].schedule
    assert [w.min_replicas for w in ways[3].schedule] == [60]


def test_the_dev_stack_replays_the_ramps_asks_faster() -> None:
    shape = demand.Shape()
    segment = demand.ramp_segment(shape, 20.0, before=600, after=3600)
    assert (segment.start, segment.end) == (shape.campaign[0] - 600, shape.campaign[0] + 3600)
    assert segment.real(3600) == 180.0  # an hour of the trace: 3 minutes
    trace = [Lease(at=segment.start - 1, hold=600), Lease(at=segment.start, hold=600)]
    trace += [Lease(at=segment.end - 1, hold=600), Lease(at=segment.end, hold=600)]
    assert [i for i, _ in segment.asks(trace)] == [1, 2]


def test_a_window_opens_on_the_real_minute_the_ramp_falls_on() -> None:
    # 2026-12-06 01:37:20 UTC -> 01:38:00, which the cron names.
    t = 1796521040.0
    assert demand.next_minute(t) == 1796521080.0
    assert demand.next_minute(1796521080.0) == 1796521080.0
    assert demand.minute_cron(1796521080.0) == "38 1 6 12 *"
