"""The account's spendCap in its ledger (workflows/ledger/state.py), pure.

A ledger with `max_devices` lists the account before it deals (`count_devices`)
and counts every permit spent since that listing began, and every one still
outstanding: a device made anywhere in the account is counted, none twice for
longer than until the next listing. No fixture of conftest.py: no server.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from devicepool.activities.models import LedgerConfig
from devicepool.workflows.ledger.dealing import deal
from devicepool.workflows.ledger.state import CAP_RECOUNT, CAP_RECOUNT_MAX, LedgerState, LedgerView
from devicepool.workflows.shared.protocol import PermitRequest, PermitsUsed
from tests.helpers.ratelimit_stack import permit_request as req

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def capped(max_devices: int | None, capacity: int = 100) -> LedgerState:
    return LedgerState(
        config=LedgerConfig(
            capacity=capacity,
            window_seconds=60,
            margin_seconds=0,
            max_devices=max_devices,
            cap_text=f"maxDevices {max_devices}",
        )
    )


def round_(s: LedgerState, now: datetime) -> dict[str, int]:
    """One grant round as the workflow runs it (the listing answered beforehand)."""
    s.expire(now)
    dealt = deal(s.queue, s.free(now), s.last_pool)
    s.last_pool = dealt.last_pool
    return {i.request.pool: i.grant.count for i in s.issue(dealt.counts, now)}


def test_no_cap_no_listing_and_no_limit() -> None:
    s = capped(None)
    s.enqueue(req("r1", "a", 30), NOW)
    assert not s.recount_due(NOW)
    assert s.cap_room() is None
    assert round_(s, NOW) == {"a": 30}
    assert s.cap_news("acct") == {}


def test_nothing_is_granted_before_the_account_is_counted() -> None:
    s = capped(10)
    s.enqueue(req("r1", "a", 3), NOW)
    assert s.recount_due(NOW)
    assert s.free(NOW) == 0
    mark = s.begin_count(NOW)
    s.counted_devices(8, mark)
    assert round_(s, NOW) == {"a": 2}  # 8 billing + 2 = the cap


def test_the_cap_counts_permits_outstanding_and_spent_since_the_listing() -> None:
    s = capped(10)
    s.counted_devices(4, s.begin_count(NOW))
    s.enqueue(req("r1", "a", 3), NOW)
    assert round_(s, NOW) == {"a": 3}
    assert s.cap_count() == 7  # 4 listed + 3 outstanding
    grant_id = next(iter(s.outstanding))
    s.record_used(PermitsUsed(grant_id=grant_id, done_at=[NOW] * 2, unused=1), NOW)
    assert s.cap_count() == 6  # 4 listed + 2 made since
    s.enqueue(req("r2", "b", 10), NOW)
    assert round_(s, NOW) == {"b": 4}
    assert s.cap_room() == 0


def test_a_listing_that_began_before_a_create_finished_still_counts_it() -> None:
    s = capped(5)
    s.counted_devices(0, s.begin_count(NOW))
    s.enqueue(req("r1", "a", 2), NOW)
    round_(s, NOW)
    grant_id = next(iter(s.outstanding))
    mark = s.begin_count(NOW)  # a recount begins; the creates land while it runs
    s.record_used(PermitsUsed(grant_id=grant_id, done_at=[NOW, NOW]), NOW)
    s.counted_devices(0, mark)  # the listing missed both
    assert s.cap_count() == 2


def test_a_lapsed_lease_counts_as_a_device() -> None:
    s = capped(5)
    s.counted_devices(0, s.begin_count(NOW))
    s.enqueue(
        PermitRequest(request_id="r", requester="b/r", pool="a", count=2, lease_seconds=10), NOW
    )
    round_(s, NOW)
    s.expire(NOW + timedelta(seconds=11))
    assert not s.outstanding
    assert s.cap_count() == 2


def test_a_recount_is_due_only_while_the_cap_holds_and_the_count_is_old() -> None:
    s = capped(2)
    s.counted_devices(2, s.begin_count(NOW))
    assert not s.recount_due(NOW)  # nobody waits
    s.enqueue(req("r1", "a", 1), NOW)
    assert s.cap_holds()
    assert not s.recount_due(NOW + CAP_RECOUNT / 2)
    assert s.recount_due(NOW + CAP_RECOUNT)
    assert s.next_wake() == NOW + CAP_RECOUNT
    s.counted_devices(1, s.begin_count(NOW + CAP_RECOUNT))  # one went away
    assert not s.cap_holds()
    assert round_(s, NOW + CAP_RECOUNT) == {"a": 1}


def test_held_pools_are_told_once_again_when_the_cap_changes_and_when_released() -> None:
    s = capped(2)
    s.counted_devices(2, s.begin_count(NOW))
    s.enqueue(req("r1", "a", 3), NOW)
    s.enqueue(req("r2", "b", 1), NOW)
    round_(s, NOW)
    news = s.cap_news("acct")
    assert set(news) == {"a", "b"}
    assert "spendCap (maxDevices 2) allows 2 device(s)" in news["a"]
    assert "2 bill or are being created, and 3 create(s) of this pool wait" in news["a"]
    assert "accounts.acct.spendCap" in news["a"]
    assert s.cap_news("acct") == {}  # told once
    s.config = s.config.model_copy(update={"max_devices": 3, "cap_text": "maxDevices 3"})
    assert round_(s, NOW) == {"a": 1}  # a turn each: a first
    news = s.cap_news("acct")
    assert set(news) == {"a", "b"} and "allows 3" in news["b"]
    s.config = s.config.model_copy(update={"max_devices": None})
    assert round_(s, NOW) == {"a": 2, "b": 1}
    assert s.cap_news("acct") == {"a": "", "b": ""}
    assert s.cap_held == {}


def test_the_ledger_view_shows_the_cap() -> None:
    s = capped(4)
    s.counted_devices(3, s.begin_count(NOW))
    s.enqueue(req("r1", "a", 2), NOW)
    round_(s, NOW)
    s.cap_news("acct")
    view = LedgerView.of("acct", s)
    assert (view.max_devices, view.cap_count, view.cap_held) == (4, 4, ["a"])
    # Carried whole across continue-as-new.
    again = LedgerState.model_validate_json(s.model_dump_json())
    assert again.cap_count() == 4 and again.cap_held == s.cap_held


# ---------------------------------------------------------------- the property

# Steps: a pool asks; a round deals; a batch reports a grant used (creating
# devices, or not); a listing begins; a listing answers; a device goes away.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["ask", "round", "use", "begin", "answer", "gone"]), st.integers(0, 6)
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(0, 12), steps=STEPS)
def test_the_account_never_bills_more_devices_than_its_cap(
    cap: int, steps: list[tuple[str, int]]
) -> None:
    """Whatever the order of grants, creates, listings and devices going away,
    the devices billing never exceed the cap, and the ledger never counts fewer
    than there are."""
    s = capped(cap, capacity=5)
    devices = 0
    listing: tuple[int, int] | None = None  # (mark, devices seen) of a listing under way
    asked = 0
    for step, n in steps:
        now = NOW
        if step == "ask":
            asked += 1
            s.enqueue(req(f"r{asked}", f"p{n % 3}", n + 1), now)
        elif step == "round":
            round_(s, now)
        elif step == "use" and s.outstanding:
            grant_id = sorted(s.outstanding)[n % len(s.outstanding)]
            made = min(n, s.outstanding[grant_id].count)
            devices += made
            s.record_used(
                PermitsUsed(
                    grant_id=grant_id,
                    done_at=[now] * made,
                    failed=0,
                    unused=s.outstanding[grant_id].count - made,
                ),
                now,
            )
            if listing is not None and n % 2:
                listing = (listing[0], devices)  # the listing saw the new devices
        elif step == "begin":
            listing = (s.begin_count(now), devices)
        elif step == "answer" and listing is not None:
            s.counted_devices(listing[1], listing[0])
            listing = None
        elif step == "gone" and devices:
            devices -= 1
            if listing is not None and n % 2:
                listing = (listing[0], devices)
        assert devices + s.in_flight() <= cap
        count = s.cap_count()
        if count is not None:
            assert count >= devices + s.in_flight()


def test_a_cap_that_keeps_holding_is_counted_less_and_less_often() -> None:
    """A held cap is a 1-request/s Local API account's permanent share unless it backs off:
    every count that finds nothing changed doubles the wait, up to `CAP_RECOUNT_MAX`; one
    that finds a change (a device went away) counts at `CAP_RECOUNT` again."""
    s = capped(2)
    s.enqueue(req("r1", "a", 1), NOW)
    now = NOW
    s.counted_devices(2, s.begin_count(now))
    counts = 1
    # An hour of a cap that keeps holding: one listing per due time.
    while now < NOW + timedelta(hours=1):
        wake = s.next_wake()
        assert wake is not None and wake > now
        now = wake
        if s.recount_due(now):
            s.counted_devices(2, s.begin_count(now))
            counts += 1
    assert counts <= 3600 / CAP_RECOUNT_MAX.total_seconds() + 6, counts
    assert s.next_wake() == s.cap_counted_at + CAP_RECOUNT_MAX  # type: ignore[operator]
    # A device goes away elsewhere in the account; the next count sees it, and the one
    # after comes soon again.
    assert s.cap_counted_at is not None
    now = s.cap_counted_at + CAP_RECOUNT_MAX
    assert s.recount_due(now)
    s.counted_devices(1, s.begin_count(now))
    assert not s.cap_holds()
    s.enqueue(req("r2", "b", 2), now)  # held again by one
    assert s.cap_holds()
    assert s.next_wake() == now + CAP_RECOUNT
