"""What sizing a pool from its demand saves: one seeded week of leases, four ways to size.

**The trace** (`week_trace`, seed `--seed`, 40 by default): a week of lease asks from Tuesday
2026-12-01 00:00 UTC to the next Tuesday. Asks arrive as a Poisson process (drawn by thinning
from `random.Random(seed)`), each holding its device for a time uniform in 10-30 min
(`--hold-min`, `--hold-max`). Weekdays: `--few` (4) asks an hour, day and night. Friday 18:00
(the campaign, 54 h, to Monday 00:00): the rate ramps linearly over `--ramp-minutes` (15) to
60 / the mean hold (`--peak` 60 concurrent leases: 3 asks a minute), holds until Monday 00:00,
then falls back to the few an hour (Monday and Tuesday: the scale-down).

**The oracle** (the floor no way can beat): every lease on a device booted for it just in time
and gone at its end: the leased device-hours plus one boot per lease.

**Four ways**, on the same trace and provider limits (the product's defaults: an account's
`createsPerMinute` 20 in a window of 60 s + 1 s margin, the emulator's 45-s boot, a lease queue
of 50 tickets waiting at most 5 min, `onRelease: keep`):

- static peak: `replicas` 80, all week;
- static average: `replicas` = the trace's mean concurrent leases, rounded up;
- autoscale: `{minReplicas 0, maxReplicas 80, idleBuffer 2, scaleDownAfter 5m, stabilization
  5m}` (docs/leases.md's example);
- autoscale + schedule: the same with the window `{cron: "0 18 * * fri", duration: 54h,
  minReplicas: 60}` (UTC).

Per way: device-hours billed (each device from its create to its termination, the boot
included, at the account's $0.10 an hour), lease wait (ask -> grant) p50/p95/max over every
lease granted and p95 over those asked during the ramp (Friday 18:00-19:00), leases refused (a
full queue, or 5 min waited), the most devices, and how long after Monday 00:00 the pool was
back to `--few` + 2 devices or fewer. Goals, printed beside the figures with whether each is
met: autoscale <= 1.3x the oracle's device-hours and <= 0.3x static peak's; ramp wait p95 <=
the boot + 10 s without a schedule, <= 5 s with one; 0 leases refused.

**How a week is run.** Temporal's timers are wall-clock (the emulator's clock can be sped up,
a workflow's cannot), so a week of the product is a week. Two runs, every figure labelled:

- `[model]`: a discrete-event simulation of the whole week, for the four ways, that sizes an
  autoscaled pool with the product's own pass function, `autoscaling.resize` (under it
  `desired_from_demand`, `Stabilization.apply`, `schedule_floor` at the product's warm pace,
  `may_go`, `next_may_go`), its answer's `target` the pool's `replicas`, and the account's
  create window and the boot: a pass on every ask, give-back, device ready, create-window slot
  and wake `resize` asks for, and every 30 s (the pools' `resyncSeconds`); a ticket is granted
  the oldest free ready device at once, FIFO; devices go in `may_go`'s order. What it leaves
  out: the product's latencies (a pass, a create's round trip, a ticket's claim), when the
  product runs a pass (the model runs one on every change of demand), provider faults, the
  spend cap. About 20 s of one core.
- `[dev stack]`: the product itself on the Friday ramp (`--before` 10 min before 18:00 to
  `--after` 60 min after), replayed `--speed` (20) times faster: a Temporal dev server, the
  emulator in process with its clock that much faster, the worker's workflows and activities
  in process, four pools on four accounts at once (an account's create window is its own), so
  one run gives all four ways. The account's window, the pools' passes and idle grace,
  `scaleDownAfter`, `stabilization`, a window's duration and the lease queue's wait are all
  divided by the speed; a window's cron fires on the real minute the trace's Friday 18:00
  falls on. Each ask is `PoolClient.acquire_lease` (the Python client, by signal) for its hold
  (divided by the speed; the lease expires, nobody releases); its wait is the pool's own
  (`waitedSeconds`, the workflow's clock) times the speed. Device-hours are the emulator's
  live devices by pool, sampled every 0.25 s: the segment's, not the week's, so the
  device-hour goals are the model's alone. At 20x a trace minute is 3 s, and each second of
  the product's own latency (a pass, a create's round trip) reads as 20 s. The Monday scale-down is the model's alone. About 5 min; run when a
  pool takes `spec.autoscale` (`--dev-stack auto`), else says so (`always`: the static ways
  alone then; `never`: the model alone).

    .venv/bin/python bench/demand.py [--seed 40] [--peak 60] [--few 4] [--ramp-minutes 15]
        [--dev-stack auto|always|never] [--speed 20] [--before 10] [--after 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
from _stack import dev_server
from pydantic import SecretStr
from temporalio.client import Client

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.models import PoolSettings
from devicepool.activities.settings import AccountSettings
from devicepool.api.autoscale import AutoscaleSpec, ScheduleWindow
from devicepool.api.names import TASK_QUEUE, pool_workflow_id
from devicepool.api.v1beta1 import (
    DevicePoolSpec,
    LeaseQueueSpec,
    LeaseSpec,
    ObjectMeta,
    ProviderRef,
)
from devicepool.client import PoolClient
from devicepool.client.errors import LeaseNotGranted, LeaseRefused
from devicepool.emulator.app import create_app
from devicepool.emulator.config import EmulatorConfig
from devicepool.worker.accounts import register_accounts
from devicepool.worker.build import account_workers, pool_queue_workers
from devicepool.workflows.pool.messages import PoolInput
from devicepool.workflows.reconciler.autoscaling import resize
from devicepool.workflows.reconciler.demand import Stabilization, may_go

START = datetime(2026, 12, 1, tzinfo=UTC)  # a Tuesday
WEEK = 7 * 86400.0
HOUR = 3600.0
# Friday 18:00 to Monday 00:00, seconds from START.
CAMPAIGN = (3 * 86400.0 + 18 * HOUR, 6 * 86400.0)
RAMP_WINDOW = HOUR  # "during the ramp": asks of the campaign's first hour
PASS_SECONDS = 30.0  # a pool's resync (PoolSettings.resyncSeconds)
PEAK_REPLICAS = 80
WINDOW_CRON = "0 18 * * fri"


# ---------------------------------------------------------------- the trace


@dataclass(frozen=True)
class Lease:
    """One ask: at `at` seconds from START, holding its device `hold` seconds once granted."""

    at: float
    hold: float


@dataclass(frozen=True)
class Shape:
    """The trace's demand: `few` asks an hour outside the campaign; in it, a ramp over
    `ramp_minutes` to `peak` concurrent leases (peak / the mean hold, asks a second)."""

    few: float = 4.0
    peak: int = 60
    ramp_minutes: float = 15.0
    hold_min: float = 600.0
    hold_max: float = 1800.0
    campaign: tuple[float, float] = CAMPAIGN

    @property
    def peak_rate(self) -> float:
        return self.peak / ((self.hold_min + self.hold_max) / 2)

    def rate(self, t: float) -> float:
        """Asks a second at `t`."""
        base = self.few / HOUR
        start, end = self.campaign
        if not start <= t < end:
            return base
        ramp = self.ramp_minutes * 60
        if ramp <= 0 or t >= start + ramp:
            return max(base, self.peak_rate)
        return base + (max(base, self.peak_rate) - base) * (t - start) / ramp


def week_trace(seed: int, shape: Shape = Shape(), *, length: float = WEEK) -> list[Lease]:
    """The asks of `length` seconds of `shape`, the same for the same seed (thinning a Poisson
    process at the highest rate)."""
    rng = random.Random(seed)
    top = max(shape.few / HOUR, shape.peak_rate)  # `rate` is never higher
    asks: list[Lease] = []
    t = 0.0
    while True:
        t += rng.expovariate(top)
        if t >= length:
            return asks
        # Both draws every time: the holds do not depend on which asks were kept.
        keep, hold = rng.random(), rng.uniform(shape.hold_min, shape.hold_max)
        if keep * top < shape.rate(t):
            asks.append(Lease(at=t, hold=hold))


def mean_concurrent(trace: Sequence[Lease], length: float = WEEK) -> float:
    """The trace's leased seconds over its length: the mean leases held at once."""
    return sum(lease.hold for lease in trace) / length


def most_concurrent(trace: Sequence[Lease]) -> int:
    """The most leases held at once if every ask were granted at once."""
    edges = sorted(
        [(lease.at, 1) for lease in trace] + [(lease.at + lease.hold, -1) for lease in trace]
    )
    most = held = 0
    for _, step in edges:
        held += step
        most = max(most, held)
    return most


def oracle_hours(trace: Sequence[Lease], boot: float) -> float:
    """The floor: the leased device-hours, plus one boot for each lease."""
    return sum(lease.hold + boot for lease in trace) / HOUR


# ---------------------------------------------------------------- the limits and the ways


@dataclass(frozen=True)
class Limits:
    """The provider's and the pool's limits every way runs under (the product's defaults)."""

    creates_per_minute: int
    window: float  # seconds a create holds its place in the account's window
    boot: float
    queue_max: int
    max_wait: float
    price_per_hour: float
    pass_seconds: float = PASS_SECONDS

    @classmethod
    def defaults(cls) -> Limits:
        account = AccountSettings(name="bench")
        queue = LeaseQueueSpec()
        return cls(
            creates_per_minute=account.creates_per_minute,
            window=account.window_seconds + account.window_margin_seconds,
            boot=EmulatorConfig().provision_seconds,
            queue_max=queue.max,
            max_wait=queue.max_wait,
            price_per_hour=account.price_per_hour,
        )


@dataclass(frozen=True)
class Way:
    """How a pool is sized: `replicas` fixed, or `autoscale` (with `schedule`'s windows)."""

    name: str
    replicas: int = 0
    autoscale: AutoscaleSpec | None = None
    schedule: tuple[ScheduleWindow, ...] = ()


def autoscale_spec(peak_replicas: int = PEAK_REPLICAS) -> AutoscaleSpec:
    return AutoscaleSpec(
        min_replicas=0,
        max_replicas=peak_replicas,
        idle_buffer=2,
        scale_down_after="5m",
        stabilization="5m",
    )


def campaign_window(peak: int) -> ScheduleWindow:
    return ScheduleWindow(cron=WINDOW_CRON, duration="54h", min_replicas=peak, time_zone="UTC")


def four_ways(trace: Sequence[Lease], peak: int) -> list[Way]:
    average = max(1, math.ceil(mean_concurrent(trace)))
    spec = autoscale_spec()
    return [
        Way(f"static peak (replicas {PEAK_REPLICAS})", replicas=PEAK_REPLICAS),
        Way(f"static average (replicas {average})", replicas=average),
        Way("autoscale", autoscale=spec),
        Way("autoscale + schedule", autoscale=spec, schedule=(campaign_window(peak),)),
    ]


# ---------------------------------------------------------------- the model


@dataclass
class Device:
    id: str
    created: float
    ready: float
    lease: int | None = None  # the trace's index of the lease holding it
    idle_since: float | None = None  # set once ready, and at each give-back


@dataclass
class Outcome:
    """What one way did with the trace (seconds from START unless named)."""

    way: str
    device_seconds: float = 0.0
    waits: list[float] = field(default_factory=list)  # every lease granted
    ramp_waits: list[float] = field(default_factory=list)  # those asked during the ramp
    refused_full: int = 0
    refused_waited: int = 0
    creates: int = 0
    terminations: int = 0
    most: int = 0
    back_after: float | None = None  # after the campaign's end: back to `back_to` devices

    @property
    def device_hours(self) -> float:
        return self.device_seconds / HOUR

    @property
    def refused(self) -> int:
        return self.refused_full + self.refused_waited


def pct(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (0 for no values: nobody waited)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


ASK, END, READY, EXPIRE, WAKE = range(5)


class Model:
    """One pool sized one way, run through the trace (see the module docstring)."""

    def __init__(
        self,
        way: Way,
        trace: Sequence[Lease],
        limits: Limits,
        *,
        length: float = WEEK,
        campaign: tuple[float, float] = CAMPAIGN,
        back_to: int = 6,
        start: datetime = START,
    ) -> None:
        self.way, self.trace, self.limits, self.length = way, trace, limits, length
        self.campaign, self.back_to, self.start = campaign, back_to, start
        self.out = Outcome(way.name)
        self.devices: dict[str, Device] = {}
        self.queue: deque[int] = deque()
        self.asked: dict[int, float] = {}
        self.creates: deque[float] = deque()  # grant times still in the account's window
        self.stabilization = Stabilization()
        self.replicas = way.replicas  # the spec's, which `resize` sets for an autoscaled pool
        self.wakes: set[float] = set()
        self.events: list[tuple[float, int, int, int | str]] = []
        self.seq = 0
        self.made = 0
        self.now = 0.0

    # -- events

    def push(self, t: float, kind: int, arg: int | str = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, arg))

    def run(self) -> Outcome:
        for index, lease in enumerate(self.trace):
            self.push(lease.at, ASK, index)
        t = 0.0
        while t < self.length:
            self.push(t, WAKE)
            t += self.limits.pass_seconds
        # The pool as it stands when the week starts: its size then, every device ready.
        for _ in range(self.desired(0.0)):
            self.add(0.0, ready=0.0)
        while self.events and self.events[0][0] < self.length:
            self.now, _, kind, arg = heapq.heappop(self.events)
            self.handle(kind, arg)
            self.reconcile()
        for device in self.devices.values():
            self.out.device_seconds += self.length - device.created
        return self.out

    def handle(self, kind: int, arg: int | str) -> None:
        if kind == ASK:
            assert isinstance(arg, int)
            if len(self.queue) >= self.limits.queue_max:
                self.out.refused_full += 1
                return
            self.asked[arg] = self.now
            self.queue.append(arg)
            self.push(self.now + self.limits.max_wait, EXPIRE, arg)
        elif kind == EXPIRE:
            assert isinstance(arg, int)
            if arg in self.asked and arg in self.queue:
                self.queue.remove(arg)
                del self.asked[arg]
                self.out.refused_waited += 1
        elif kind == END:
            assert isinstance(arg, str)
            device = self.devices[arg]
            device.lease, device.idle_since = None, self.now
        elif kind == READY:
            assert isinstance(arg, str)
            if arg in self.devices:
                self.devices[arg].idle_since = self.now

    # -- a pass

    def reconcile(self) -> None:
        self.grant()
        desired = self.desired(self.now)
        count = len(self.devices)
        if desired > count:
            self.grow(desired - count)
        elif desired < count:
            self.shrink(count - desired)
        count = len(self.devices)
        self.out.most = max(self.out.most, count)
        end = self.campaign[1]
        if self.out.back_after is None and self.now >= end and count <= self.back_to:
            self.out.back_after = self.now - end

    def grant(self) -> None:
        if not self.queue:
            return
        free = sorted(
            (d for d in self.devices.values() if d.lease is None and d.idle_since is not None),
            key=lambda d: d.id,
        )
        while self.queue and free:
            index, device = self.queue.popleft(), free.pop(0)
            waited = self.now - self.asked.pop(index)
            self.out.waits.append(waited)
            asked = self.trace[index].at
            if self.campaign[0] <= asked < self.campaign[0] + RAMP_WINDOW:
                self.out.ramp_waits.append(waited)
            device.lease, device.idle_since = index, None
            self.push(self.now + self.trace[index].hold, END, device.id)

    def desired(self, t: float) -> int:
        """The size for a pass at `t`: `replicas`, or the product's own `resize` (which
        applies stabilization, the schedule's floor and who may go, and says when to look
        again)."""
        spec = self.way.autoscale
        if spec is None:
            return self.way.replicas
        moment = self.start + timedelta(seconds=t)
        leases = {d.id for d in self.devices.values() if d.lease is not None}
        resized = resize(
            autoscale=spec,
            schedule=self.way.schedule,
            leased=len(leases),
            queued=len(self.queue),
            members=list(self.devices),
            leases=leases,
            idle_since=self.idle_since(),
            stabilization=self.stabilization,
            current=self.replicas,
            now=moment,
        )
        self.replicas = resized.target
        wake = None if resized.wake is None else (resized.wake - self.start).total_seconds()
        if wake is not None and wake not in self.wakes:  # one pass for each time asked
            self.wakes.add(wake)
            self.push(wake, WAKE)
        return resized.target

    def idle_since(self) -> dict[str, datetime]:
        return {
            d.id: self.start + timedelta(seconds=d.idle_since)
            for d in self.devices.values()
            if d.idle_since is not None
        }

    def grow(self, wanted: int) -> None:
        while self.creates and self.creates[0] <= self.now - self.limits.window:
            self.creates.popleft()
        room = self.limits.creates_per_minute - len(self.creates)
        for _ in range(min(wanted, room)):
            self.creates.append(self.now)
            self.add(self.now, ready=self.now + self.limits.boot)
        if wanted > room and self.creates:  # the next place in the window
            self.push(self.creates[0] + self.limits.window, WAKE)

    def add(self, t: float, *, ready: float) -> None:
        self.made += 1
        device = Device(id=f"d{self.made:06d}", created=t, ready=ready)
        self.devices[device.id] = device
        if ready <= t:
            device.idle_since = t
        else:
            self.out.creates += 1
            self.push(ready, READY, device.id)

    def shrink(self, extra: int) -> None:
        """`extra` devices go, as `may_go` orders them (`resize` has left no more than it
        names)."""
        spec = self.way.autoscale
        if spec is None:  # a static pool above its replicas: never here
            return
        moment = self.start + timedelta(seconds=self.now)
        leases = {d.id for d in self.devices.values() if d.lease is not None}
        going = may_go(self.devices, leases, self.idle_since(), spec.scale_down_after, moment)
        for device_id in going[:extra]:
            device = self.devices.pop(device_id)
            self.out.device_seconds += self.now - device.created
            self.out.terminations += 1


def simulate(
    way: Way,
    trace: Sequence[Lease],
    limits: Limits,
    *,
    length: float = WEEK,
    campaign: tuple[float, float] = CAMPAIGN,
    back_to: int = 6,
) -> Outcome:
    return Model(way, trace, limits, length=length, campaign=campaign, back_to=back_to).run()


# ---------------------------------------------------------------- the goals


@dataclass(frozen=True)
class Goal:
    what: str
    figure: float
    bound: float

    @property
    def met(self) -> bool:
        return self.figure <= self.bound

    def line(self) -> str:
        verdict = "met" if self.met else "NOT MET"
        return f"{self.what}: {self.figure:.1f} <= {self.bound:.1f}: {verdict}"


def goals(outcomes: Sequence[Outcome], oracle: float, limits: Limits) -> list[Goal]:
    """The issue's goals, for the autoscale ways (outcomes[0] is static peak)."""
    peak = outcomes[0].device_hours
    found: list[Goal] = []
    for out in outcomes:
        if not out.way.startswith("autoscale"):
            continue
        scheduled = "schedule" in out.way
        ramp_bound = 5.0 if scheduled else limits.boot + 10
        found += [
            Goal(f"{out.way}: device-hours <= 1.3x the oracle", out.device_hours, 1.3 * oracle),
            Goal(f"{out.way}: device-hours <= 0.3x static peak", out.device_hours, 0.3 * peak),
            Goal(
                f"{out.way}: ramp wait p95 (s) <= "
                + ("5 s" if scheduled else f"the boot {limits.boot:g} s + 10 s"),
                pct(out.ramp_waits, 0.95),
                ramp_bound,
            ),
            Goal(f"{out.way}: leases refused <= 0", out.refused, 0),
        ]
    return found


# ---------------------------------------------------------------- the report


def clock(seconds: float) -> str:
    moment = START + timedelta(seconds=seconds)
    return f"{moment:%a %H:%M}"


def row(out: Outcome, oracle: float, peak: float, price: float) -> str:
    waits = (
        "/".join(f"{pct(out.waits, q):.0f}" for q in (0.5, 0.95))
        + f"/{max(out.waits, default=0):.0f}"
    )
    back = "-" if out.back_after is None else f"{out.back_after / 60:.0f} min"
    return (
        f"{out.way:<28} {out.device_hours:9.1f} {out.device_hours / oracle:6.2f}x"
        f" {out.device_hours / peak:5.2f}x ${out.device_hours * price:8.2f}"
        f" {waits:>12} {pct(out.ramp_waits, 0.95):9.0f}"
        f" {out.refused_full:>5}/{out.refused_waited:<5} {out.most:5} {out.creates:7} {back:>8}"
    )


def report(trace: Sequence[Lease], shape: Shape, limits: Limits, seed: int) -> list[Outcome]:
    oracle = oracle_hours(trace, limits.boot)
    print(
        f"[model] the trace (seed {seed}): {len(trace)} asks from {clock(0)} {START:%Y-%m-%d} "
        f"for a week; {shape.few:g} an hour outside the campaign, a {shape.ramp_minutes:g}-min "
        f"ramp at {clock(shape.campaign[0])} to {shape.peak} concurrent "
        f"({shape.peak_rate * 60:.1f} asks a minute) until {clock(shape.campaign[1])}; holds "
        f"{shape.hold_min / 60:g}-{shape.hold_max / 60:g} min; at most "
        f"{most_concurrent(trace)} held at once, {mean_concurrent(trace):.1f} on average",
        flush=True,
    )
    print(
        f"[model] limits: {limits.creates_per_minute} creates in {limits.window:g} s, boot "
        f"{limits.boot:g} s, lease queue {limits.queue_max} waiting at most "
        f"{limits.max_wait:g} s, a pass every {limits.pass_seconds:g} s, "
        f"${limits.price_per_hour:.2f} a device-hour",
        flush=True,
    )
    print(
        f"[model] the oracle (leased hours + a {limits.boot:g}-s boot per lease): "
        f"{oracle:.1f} device-hours, ${oracle * limits.price_per_hour:.2f}",
        flush=True,
    )
    back_to = math.ceil(shape.few) + 2  # the few leased, and the buffer
    ways = four_ways(trace, shape.peak)
    outcomes = [simulate(way, trace, limits, back_to=back_to) for way in ways]
    peak = outcomes[0].device_hours
    print(
        f"[model] {'way':<28} {'device-h':>9} {'oracle':>7} {'peak':>6} {'$/week':>9}"
        f" {'wait p50/95/max s':>12} {'ramp p95':>9} {'refused full/waited':>11}"
        f" {'most':>5} {'creates':>7} {'back in':>8}",
        flush=True,
    )
    for out in outcomes:
        print(f"[model] {row(out, oracle, peak, limits.price_per_hour)}", flush=True)
    print(
        f"[model] back in: after {clock(shape.campaign[1])}, to {back_to} devices or fewer;"
        f" refused: the queue full / {limits.max_wait:g} s waited",
        flush=True,
    )
    for goal in goals(outcomes, oracle, limits):
        print(f"[model] goal {goal.line()}", flush=True)
    return outcomes


# ---------------------------------------------------------------- the product on a dev stack


def product_autoscales() -> bool:
    """Whether a pool's spec takes `autoscale` (the product's wiring of demand scaling)."""
    return "autoscale" in DevicePoolSpec.model_fields


@dataclass
class Segment:
    """A stretch of the trace replayed on the dev stack, `speed` times faster than the trace."""

    start: float  # trace seconds
    end: float
    speed: float

    def asks(self, trace: Sequence[Lease]) -> list[tuple[int, Lease]]:
        return [(i, a) for i, a in enumerate(trace) if self.start <= a.at < self.end]

    def real(self, seconds: float) -> float:
        return seconds / self.speed


def ramp_segment(shape: Shape, speed: float, *, before: float, after: float) -> Segment:
    return Segment(shape.campaign[0] - before, shape.campaign[0] + after, speed)


def next_minute(t: float) -> float:
    """The first whole UTC minute at or after `t` (a time.time())."""
    return math.ceil(t / 60) * 60


def minute_cron(t: float) -> str:
    """A cron that fires at the UTC minute `t` (a whole minute, time.time())."""
    at = datetime.fromtimestamp(t, UTC)
    return f"{at.minute} {at.hour} {at.day} {at.month} *"


async def on_dev_stack(
    trace: Sequence[Lease], shape: Shape, limits: Limits, segment: Segment
) -> list[Outcome]:
    """The Friday ramp on the product: four pools on four accounts at once (each account's
    create window is its own), the emulator's clock and the pools' intervals `speed` times
    faster, the asks of `segment` replayed at that speed through `PoolClient.acquire_lease`.
    Waits are the pool's own (`waitedSeconds`, its clock), times the speed."""
    k = segment.speed
    ways = four_ways(trace, shape.peak)
    if not product_autoscales():
        ways = [w for w in ways if w.autoscale is None]
    names = [f"demand-{i}" for i in range(len(ways))]
    url = "http://demand.bench"
    app = create_app(
        EmulatorConfig(
            accounts={name: [f"key-{name}"] for name in names},
            provision_seconds=limits.boot,
            creates_per_minute=limits.creates_per_minute,
            speed=k,
        )
    )
    transport = httpx.ASGITransport(app=app)
    settings = PoolSettings(
        resync_seconds=limits.pass_seconds / k,
        offline_after_seconds=180 / k,
        startup_timeout_seconds=300 / k,
        idle_grace_seconds=60 / k,
    )
    accounts = {
        name: AccountSettings(
            name=name,
            base_url=url,
            api_key=SecretStr(f"key-{name}"),
            creates_per_minute=limits.creates_per_minute,
            window_seconds=60 / k,
            window_margin_seconds=(limits.window - 60) / k,
        )
        for name in names
    }
    activities = DeviceActivities(
        accounts=accounts, proxy_pools={}, settings=settings, transport=transport
    )
    max_wait = timedelta(seconds=limits.max_wait / k)
    outcomes = [Outcome(way.name) for way in ways]

    def spec(way: Way, name: str, cron: str | None) -> DevicePoolSpec:
        fields: dict[str, object] = {
            "platform": "android",
            "region": "us-west",
            "os_version": "14",
            "replicas": way.replicas,
            "provider": ProviderRef(account=name),
            "leases": LeaseSpec.model_validate(
                {"queue": {"max": limits.queue_max, "max_wait": max_wait}}
            ),
        }
        if way.autoscale is not None:
            fields["autoscale"] = way.autoscale.model_copy(
                update={
                    "scale_down_after": way.autoscale.scale_down_after / k,
                    "stabilization": way.autoscale.stabilization / k,
                }
            )
            fields["replicas"] = way.autoscale.min_replicas + way.autoscale.idle_buffer
        if way.schedule and cron is not None:
            fields["schedule"] = [
                w.model_copy(update={"cron": cron, "duration": w.duration / k})
                for w in way.schedule
            ]
        return DevicePoolSpec(**fields)  # type: ignore[arg-type]

    async with (
        await dev_server() as env,
        httpx.AsyncClient(transport=transport, base_url=url) as http,
        contextlib.AsyncExitStack() as workers,
    ):
        for worker in [
            *pool_queue_workers(env.client, activities),
            *account_workers(env.client, activities, names),
        ]:
            await workers.enter_async_context(worker)
        # The accounts' creation windows (each its own ledger), as a worker starts them.
        await register_accounts(env.client, accounts)
        pools = PoolClient(env.client)

        async def live() -> dict[str, int]:
            stats = (await http.get("/_emulator/stats")).json()
            return {name: int(stats["devices"]["byPool"].get(name, 0)) for name in names}

        async def settled(sizes: dict[str, int], timeout: float) -> None:
            deadline, ready = time.monotonic() + timeout, {}
            while time.monotonic() < deadline:
                ready = {name: (await pools.get(name))["readyDevices"] for name in sizes}
                if ready == sizes:
                    return
                await asyncio.sleep(0.5)
            why = {
                name: [c.get("message", "") for c in (await pools.get(name))["conditions"]]
                for name in sizes
            }
            raise TimeoutError(
                f"the pools at {ready}, not {sizes}, within {timeout:g} s; conditions {why}"
            )

        # The pools at their size before the ramp; the scheduled one last, its window's cron
        # on the real minute the trace's Friday 18:00 falls on.
        lead = segment.real(shape.campaign[0] - segment.start)
        for way, name in zip(ways, names, strict=True):
            if not way.schedule:
                await start_pool_with(env.client, name, spec(way, name, None), settings)
        plain = {n: spec(w, n, None).replicas for w, n in zip(ways, names, strict=True)}
        await settled({n: r for n, r in plain.items() if not ways[names.index(n)].schedule}, 120)
        opens = next_minute(time.time() + lead + 20)
        for way, name in zip(ways, names, strict=True):
            if way.schedule:
                await start_pool_with(
                    env.client, name, spec(way, name, minute_cron(opens)), settings
                )
        t0 = opens - lead  # the segment's start, real time
        print(
            f"[dev stack] {len(ways)} pools ready; the ramp at "
            f"{datetime.fromtimestamp(opens, UTC):%H:%M:%S} UTC, replayed {k:g}x",
            flush=True,
        )

        async def one(way_index: int, index: int, lease: Lease) -> None:
            out = outcomes[way_index]
            await asyncio.sleep(max(0.0, t0 + segment.real(lease.at - segment.start) - time.time()))
            try:
                got = await pools.acquire_lease(
                    names[way_index],
                    duration=timedelta(seconds=segment.real(lease.hold)),
                    wait=max_wait,
                    holder=f"ask-{index}",
                )
            except LeaseRefused:
                out.refused_full += 1
                return
            except LeaseNotGranted:
                out.refused_waited += 1
                return
            waited = got.waited_seconds * k
            out.waits.append(waited)
            if shape.campaign[0] <= lease.at < shape.campaign[0] + RAMP_WINDOW:
                out.ramp_waits.append(waited)

        async def meter(until: float) -> None:
            last = time.time()
            while last < until:
                await asyncio.sleep(0.25)
                counts, now = await live(), time.time()
                for out, name in zip(outcomes, names, strict=True):
                    out.device_seconds += counts[name] * (now - last) * k
                    out.most = max(out.most, counts[name])
                last = now

        end = t0 + segment.real(segment.end - segment.start)
        await asyncio.sleep(max(0.0, t0 - time.time()))
        metering = asyncio.create_task(meter(end))
        asks = segment.asks(trace)
        await asyncio.gather(*(one(w, i, a) for w in range(len(ways)) for i, a in asks), metering)
        for way, name in zip(ways, names, strict=True):
            if way.autoscale is not None:  # why its size is what it is, in its own words
                status = await pools.get(name)
                said = [c.get("message", "") for c in status["conditions"]]
                print(f"[dev stack] {name} ({way.name}) at the end: {said[0]!r}", flush=True)
    await activities.aclose()
    return outcomes


async def start_pool_with(
    client: Client, name: str, spec: DevicePoolSpec, settings: PoolSettings
) -> None:
    """Start the DevicePool `name` as `devicepool apply` would, with `settings`."""
    await client.start_workflow(
        "DevicePool",
        PoolInput(metadata=ObjectMeta(name=name), spec=spec, settings=settings),
        id=pool_workflow_id(name),
        task_queue=TASK_QUEUE,
    )


def _number(text: str, *, least: float, strict: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < least or (strict and value == least):
        raise argparse.ArgumentTypeError(
            f"must be a finite number {'>' if strict else '>='} {least:g}, got {text}"
        )
    return value


def _positive(text: str) -> float:
    return _number(text, least=0, strict=True)


def _positive_or_zero(text: str) -> float:
    return _number(text, least=0, strict=False)


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= PEAK_REPLICAS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {PEAK_REPLICAS}, got {text!r}"
        )
    return int(text)


def main(args: argparse.Namespace) -> None:
    shape = Shape(
        few=args.few,
        peak=args.peak,
        ramp_minutes=args.ramp_minutes,
        hold_min=args.hold_min * 60,
        hold_max=args.hold_max * 60,
    )
    trace = week_trace(args.seed, shape)
    limits = Limits.defaults()
    report(trace, shape, limits, args.seed)
    autoscales = product_autoscales()
    if args.dev_stack == "never" or (args.dev_stack == "auto" and not autoscales):
        why = "--dev-stack never" if args.dev_stack == "never" else "no pool takes `autoscale`"
        print(f"[dev stack] not run ({why}): every figure above is the model's", flush=True)
        return
    segment = ramp_segment(shape, args.speed, before=args.before * 60, after=args.after * 60)
    print(
        f"[dev stack] the asks of {clock(segment.start)}-{clock(segment.end)} "
        f"({len(segment.asks(trace))} a pool) replayed {args.speed:g}x faster on the product: "
        f"the emulator's clock, the account's window, the pools' passes, scaleDownAfter, "
        f"stabilization and the lease queue's wait all {args.speed:g}x shorter"
        + ("" if autoscales else "; the static ways only (no pool takes `autoscale` yet)"),
        flush=True,
    )
    outcomes = asyncio.run(on_dev_stack(trace, shape, limits, segment))
    print(
        f"[dev stack] {'way':<28} {'device-h':>9} {'wait p50/95/max s':>17} {'ramp p95':>9}"
        f" {'refused full/waited':>19} {'most':>5}",
        flush=True,
    )
    for out in outcomes:
        waits = "/".join(f"{pct(out.waits, q):.0f}" for q in (0.5, 0.95))
        waits += f"/{max(out.waits, default=0):.0f}"
        print(
            f"[dev stack] {out.way:<28} {out.device_hours:9.1f} {waits:>17}"
            f" {pct(out.ramp_waits, 0.95):9.0f} {out.refused_full:>9}/{out.refused_waited:<9}"
            f" {out.most:5}",
            flush=True,
        )
    for goal in goals([Outcome("static peak", 1.0), *outcomes], 1.0, limits):
        if "device-hours" not in goal.what:  # the segment's hours are not the week's
            print(f"[dev stack] goal {goal.line()}", flush=True)


if __name__ == "__main__":
    from _results import recorded

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--few", type=_positive, default=4.0, help="asks an hour off the campaign")
    parser.add_argument(
        "--peak",
        type=_count,
        default=60,
        help=f"concurrent leases in the campaign (at most {PEAK_REPLICAS})",
    )
    parser.add_argument("--ramp-minutes", type=_positive_or_zero, default=15.0)
    parser.add_argument("--hold-min", type=_positive, default=10.0, help="minutes")
    parser.add_argument("--hold-max", type=_positive, default=30.0, help="minutes")
    parser.add_argument(
        "--dev-stack",
        choices=("auto", "always", "never"),
        default="auto",
        help="replay the ramp on the product too (auto: when a pool takes spec.autoscale)",
    )
    parser.add_argument(
        "--speed", type=_positive, default=20.0, help="the dev stack's replay, times faster"
    )
    parser.add_argument(
        "--before", type=_positive_or_zero, default=10.0, help="minutes replayed before the ramp"
    )
    parser.add_argument(
        "--after", type=_positive, default=60.0, help="minutes replayed from the ramp's start"
    )
    args = parser.parse_args()
    if args.hold_min > args.hold_max:
        parser.error(f"--hold-min ({args.hold_min:g}) must be <= --hold-max ({args.hold_max:g})")
    with recorded("demand", "Demand scaling over a week", parser, args):
        main(args)
