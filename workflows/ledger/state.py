"""The permit ledger's messages and carried state, with its accounting rules: pure, `now` comes in.

`LedgerInput` starts a run (`worker/accounts.py`) and carries `LedgerState` whole to
the next; `LedgerView` answers the `ledger` query. What counts, for how long, leases,
pauses, slow start, the account's spendCap: docs/scaling.md, "Rate limits", and
docs/pools.md, "Spend".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import Field

from devicepool.activities.models import LedgerConfig, RateLimitedReport, bounded_retry_after
from devicepool.api.base import CamelModel
from devicepool.workflows.shared.protocol import (
    PermitGrant,
    PermitIntent,
    PermitRequest,
    PermitsUsed,
)

# The longest announcements hold dealing in one busy spell (the longest an
# announcement itself holds, `PermitIntent.ttl_seconds`, by default).
ANNOUNCE_HOLD_SECONDS = 5.0
# While the account's spendCap holds, it is counted again `CAP_RECOUNT` after a count
# that found a change, twice as long after each that found none, up to the max.
CAP_RECOUNT = timedelta(seconds=5)
CAP_RECOUNT_MAX = timedelta(seconds=60)


class Outstanding(CamelModel):
    request_id: str
    pool: str
    count: int
    lease_until: datetime


class LedgerStats(CamelModel):
    granted: int = 0
    used: int = 0
    failed: int = 0
    rate_limited_reports: int = 0


@dataclass(frozen=True)
class Issued:
    """A grant just booked as outstanding, still to be signalled to its requester."""

    request: PermitRequest
    grant: PermitGrant


class LedgerState(CamelModel):
    config: LedgerConfig = Field(default_factory=LedgerConfig)
    queue: list[PermitRequest] = Field(default_factory=list)
    outstanding: dict[str, Outstanding] = Field(default_factory=dict)
    # Expiry time of every used permit still counted in the window.
    window: list[datetime] = Field(default_factory=list)
    paused_until: datetime | None = None
    # Why creates are paused until `paused_until` (None when not paused).
    paused_reason: str | None = None
    # The end of the pause the held pools were last told of (`pause_news`).
    told_pause_until: datetime | None = None
    # After an idle spell the first request waits `margin` so that requests of
    # pools growing at the same moment share the first window.
    hold_until: datetime | None = None
    # pool -> until when a request it announced is waited for
    intents: dict[str, datetime] = Field(default_factory=dict)
    # Until when announcements may hold dealing in this busy spell (set at the
    # spell's first hold, cleared when the ledger is idle again), so a stream
    # of announcements (pools applied one after another) never starves the queue.
    announce_hold_until: datetime | None = None
    allowance: int | None = None  # None: the full capacity (no slow start in progress)
    next_grant: int = 0
    last_pool: str | None = None
    stats: LedgerStats = Field(default_factory=LedgerStats)
    # The account's spendCap, counted conservatively (docs/pools.md, "Spend"): the
    # devices billing at the last listing (None: not listed yet), when that listing
    # began, `cap_spent` then, and every permit spent (used, or lapsed unreported).
    cap_base: int | None = None
    cap_counted_at: datetime | None = None
    cap_mark: int = 0
    cap_spent: int = 0
    # Counts in a row that found the same number (the recount backs off while it holds).
    cap_unchanged: int = 0
    # pool -> the spendCap that holds it, as it was told (only pools told they are held).
    cap_held: dict[str, str] = Field(default_factory=dict)

    # ------------------------------------------------------------------ counting

    def span(self) -> timedelta:
        """How long a used permit counts after its create finished."""
        return timedelta(seconds=self.config.window_seconds + self.config.margin_seconds)

    def in_flight(self) -> int:
        return sum(o.count for o in self.outstanding.values())

    def counted(self) -> int:
        return len(self.window) + self.in_flight()

    def expire(self, now: datetime) -> None:
        """Drop what no longer counts at `now`; a lapsed lease becomes a used permit."""
        for grant_id, out in list(self.outstanding.items()):
            if out.lease_until <= now:
                # Never reported: count it as used at the end of its lease.
                self.window.extend([out.lease_until + self.span()] * out.count)
                self.cap_spent += out.count
                del self.outstanding[grant_id]
        self.window = sorted(t for t in self.window if t > now)
        if self.paused_until is not None and self.paused_until <= now:
            self.paused_until = None
            self.paused_reason = None

    def free(self, now: datetime) -> int:
        if self.paused_until is not None and self.paused_until > now:
            return 0
        free = self.config.capacity - self.counted()
        if self.allowance is not None:
            free = min(free, self.allowance - self.in_flight())
        room = self.cap_room()
        if room is not None:
            free = min(free, room)
        return max(0, free)

    # ------------------------------------------------------------------ spendCap

    def cap_count(self) -> int | None:
        """The account's devices as the cap counts them (None: no cap, or not listed yet)."""
        if self.config.max_devices is None or self.cap_base is None:
            return None
        return self.cap_base + (self.cap_spent - self.cap_mark) + self.in_flight()

    def cap_room(self) -> int | None:
        """How many more devices the account's spendCap allows (None: no cap; 0 until listed)."""
        cap = self.config.max_devices
        if cap is None:
            return None
        count = self.cap_count()
        return 0 if count is None else max(0, cap - count)

    def cap_holds(self) -> bool:
        """Whether the spendCap keeps a waiting request from what it asks."""
        room = self.cap_room()
        return room is not None and room < sum(r.count for r in self.queue)

    def recount_due(self, now: datetime) -> bool:
        """Whether to list the account before dealing: never listed, or the cap holds
        a request and the last count is `CAP_RECOUNT` old."""
        if self.config.max_devices is None or not self.queue:
            return False
        if self.cap_base is None or self.cap_counted_at is None:
            return True
        return self.cap_holds() and now - self.cap_counted_at >= self.cap_recount_after()

    def cap_recount_after(self) -> timedelta:
        """How long after the last count the next one is due while the cap holds."""
        return min(CAP_RECOUNT * 2 ** min(self.cap_unchanged, 8), CAP_RECOUNT_MAX)

    def begin_count(self, now: datetime) -> int:
        """A listing of the account begins: the mark to hand `counted` with its answer."""
        self.cap_counted_at = now
        return self.cap_spent

    def counted_devices(self, devices: int, mark: int) -> None:
        """The listing begun at `mark` found `devices` billing."""
        same = self.cap_base is not None and self.cap_base - self.cap_mark == devices - mark
        self.cap_unchanged = self.cap_unchanged + 1 if same else 0
        self.cap_base, self.cap_mark = devices, mark

    def cap_news(self, account: str) -> dict[str, str]:
        """Pools to tell about the spendCap now -> the message ("": released). A pool with a
        waiting request is held while the cap leaves no room: told then, again if the cap
        changes, and once when released."""
        cap, room = self.config.max_devices, self.cap_room()
        waiting: Counter[str] = Counter()
        for r in self.queue:
            waiting[r.pool] += r.count
        held: dict[str, str] = {}
        if cap is not None and room == 0:
            limit = f"({self.config.cap_text or f'maxDevices {cap}'})"
            held = {pool: limit for pool in waiting}
        counted = self.cap_count()
        billing = "not counted yet" if counted is None else f"{counted} bill or are being created"
        news = {
            pool: (
                f"account {account!r} spendCap {limit} allows {cap} device(s) over all its "
                f"pools; {billing}, and {waiting[pool]} create(s) of this pool wait — raise "
                f"accounts.{account}.spendCap in the worker config to grow "
                "(running devices are kept)"
            )
            for pool, limit in held.items()
            if self.cap_held.get(pool) != limit
        }
        news |= {pool: "" for pool in self.cap_held if pool not in held}
        self.cap_held = held
        return news

    def next_wake(self) -> datetime | None:
        """When a waiting request may get permits next (None: nobody waits)."""
        if not self.queue:
            return None
        times: list[datetime] = []
        if self.paused_until is not None:
            times.append(self.paused_until)
        if self.window:
            times.append(self.window[0])
        times.extend(o.lease_until for o in self.outstanding.values())
        if self.cap_holds() and self.cap_counted_at is not None:
            times.append(self.cap_counted_at + self.cap_recount_after())
        return min(times) if times else None

    # ------------------------------------------------------------------ granting

    def issue(self, dealt: dict[str, int], now: datetime) -> list[Issued]:
        """Book a deal (request id -> permits) as outstanding grants, in the deal's order."""
        requests = {r.request_id: r for r in self.queue}
        issued: list[Issued] = []
        for request_id, count in dealt.items():
            request = requests[request_id]
            grant_id = f"{self.next_grant}"
            self.next_grant += 1
            self.outstanding[grant_id] = Outstanding(
                request_id=request_id,
                pool=request.pool,
                count=count,
                lease_until=now + timedelta(seconds=request.lease_seconds),
            )
            request.count -= count
            self.stats.granted += count
            grant = PermitGrant(request_id=request_id, grant_id=grant_id, count=count)
            issued.append(Issued(request=request, grant=grant))
        self.queue = [r for r in self.queue if r.count > 0]
        return issued

    def undeliverable(self, issued: Issued) -> None:
        """The requester is gone: it never got these permits, and wants no more."""
        self.outstanding.pop(issued.grant.grant_id, None)
        self.stats.granted -= issued.grant.count
        self.queue = [r for r in self.queue if r.requester != issued.request.requester]

    # ------------------------------------------------------------------ messages

    def announce(self, intent: PermitIntent, now: datetime) -> None:
        asked = any(r.pool == intent.pool for r in self.queue) or any(
            o.pool == intent.pool for o in self.outstanding.values()
        )
        if intent.expecting and not asked:
            # (A request that overtook its announcement has settled it already.)
            self.intents[intent.pool] = now + timedelta(seconds=intent.ttl_seconds)
        elif not intent.expecting:
            self.intents.pop(intent.pool, None)

    def announcement_hold(self, now: datetime) -> datetime | None:
        """Until when to wait for announced requests before dealing (None: deal now): at
        most `ANNOUNCE_HOLD_SECONDS` in one busy spell, however many pools announce."""
        self.intents = {pool: until for pool, until in self.intents.items() if until > now}
        if not (self.queue and self.intents):
            return None
        if self.announce_hold_until is None:
            self.announce_hold_until = now + timedelta(seconds=ANNOUNCE_HOLD_SECONDS)
        if self.announce_hold_until <= now:
            return None
        return min(min(self.intents.values()), self.announce_hold_until)

    def enqueue(self, request: PermitRequest, now: datetime) -> None:
        self.intents.pop(request.pool, None)
        # A re-sent request (the batch heard nothing for long) replaces the queued
        # one: its count is what the batch still needs. Surplus grants come back
        # as `unused`.
        if not self.queue and not self.outstanding and not self.window:
            self.hold_until = now + timedelta(seconds=self.config.margin_seconds)
            self.announce_hold_until = None  # a new busy spell
        self.queue = [r for r in self.queue if r.request_id != request.request_id]
        self.queue.append(request)

    def cancel(self, request_id: str) -> None:
        self.queue = [r for r in self.queue if r.request_id != request_id]

    def record_used(self, used: PermitsUsed, now: datetime) -> bool:
        """Move a reported grant into the window; False if it was not outstanding."""
        out = self.outstanding.pop(used.grant_id, None)
        if out is None:
            return False  # already expired by its lease (and counted) or a duplicate report
        spent = max(0, out.count - used.unused)
        done = list(used.done_at)[:spent]
        # A create not accounted for by time counts from now (never too early).
        done += [now] * (spent - len(done))
        self.window.extend(t + self.span() for t in done)
        self.window.sort()
        self.stats.used += spent
        self.cap_spent += spent
        self.stats.failed += used.failed
        if used.failed:
            self.allowance = 1
        elif self.allowance is not None:
            self.allowance *= 2
            if self.allowance >= self.config.capacity:
                self.allowance = None
        return True

    def record_rate_limited(self, report: RateLimitedReport, now: datetime) -> None:
        """Pause for the report's `Retry-After` (bounded: never raises), then start slowly."""
        # Any worker, an older one included, may report anything (1e12, inf, NaN):
        # an exception here would fail every workflow task of the ledger.
        seconds = bounded_retry_after(report.retry_after_seconds)
        if seconds is not None:
            until = now + timedelta(seconds=seconds)
            if self.paused_until is None or until > self.paused_until:
                self.paused_until = until
                self.paused_reason = (
                    f"provider answered 429 to a create of pool {report.pool!r}: "
                    f"retry after {seconds:g}s"
                )
        self.allowance = 1
        self.stats.rate_limited_reports += 1

    def pause_news(self, now: datetime) -> datetime | None:
        """The pause to tell the pools it holds, if there is news: it outlasts a window,
        and ends a window or more later than what they were last told (None: no news)."""
        until, window = self.paused_until, timedelta(seconds=self.config.window_seconds)
        if until is None or until - now <= window:
            return None
        if self.told_pause_until is not None and until - self.told_pause_until < window:
            return None
        self.told_pause_until = until
        return until

    def held_pools(self, also: str) -> list[str]:
        """The pools with requests waiting or permits outstanding, and `also`."""
        pools = {r.pool for r in self.queue} | {o.pool for o in self.outstanding.values()}
        return sorted(pools | {also})


class LedgerInput(CamelModel):
    account: str
    config: LedgerConfig | None = None
    # Carried across continue-as-new (None: a new ledger).
    state: LedgerState | None = None


class LedgerView(CamelModel):
    """Query `ledger`: the account's window as the ledger counts it now."""

    account: str
    capacity: int
    window_seconds: float
    margin_seconds: float
    counted: int
    outstanding: int
    # request id -> permits it still waits for
    waiting: dict[str, int]
    expecting: list[str]
    paused_until: datetime | None
    paused_reason: str | None
    allowance: int | None
    stats: LedgerStats
    # When a waiting request may get permits next (None: nobody waits).
    next_permit_at: datetime | None = None
    # The account's spendCap (devices over all its pools; None: no cap), the
    # devices it counts now (None: not listed yet), and the pools it holds.
    max_devices: int | None = None
    cap_count: int | None = None
    cap_held: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, account: str, s: LedgerState) -> LedgerView:
        return cls(
            account=account,
            capacity=s.config.capacity,
            window_seconds=s.config.window_seconds,
            margin_seconds=s.config.margin_seconds,
            counted=s.counted(),
            outstanding=s.in_flight(),
            waiting={r.request_id: r.count for r in s.queue},
            expecting=sorted(s.intents),
            paused_until=s.paused_until,
            paused_reason=s.paused_reason,
            allowance=s.allowance,
            stats=s.stats.model_copy(),
            next_permit_at=s.next_wake(),
            max_devices=s.config.max_devices,
            cap_count=s.cap_count(),
            cap_held=sorted(s.cap_held),
        )
