"""The ledger's carried state and window bookkeeping (workflows/ledger/state.py), pure.

No fixture of conftest.py is requested, so no server starts. Times are
explicit: the rules of workflows/ledger/workflow.py's docstring, one at a time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devicepool.activities.models import MAX_RETRY_AFTER_SECONDS, LedgerConfig, RateLimitedReport
from devicepool.workflows.ledger.dealing import deal
from devicepool.workflows.ledger.state import LedgerState, Outstanding
from devicepool.workflows.shared.protocol import PermitIntent, PermitRequest, PermitsUsed
from tests.helpers.ratelimit_stack import permit_request as req

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
CONFIG = LedgerConfig(capacity=5, window_seconds=60, margin_seconds=1)
SPAN = timedelta(seconds=61)


def sec(n: float) -> timedelta:
    return timedelta(seconds=n)


def state(**fields: object) -> LedgerState:
    return LedgerState(config=CONFIG).model_copy(update=fields)


def out(count: int, lease_until: datetime, pool: str = "a") -> Outstanding:
    return Outstanding(request_id="r", pool=pool, count=count, lease_until=lease_until)


# ---------------------------------------------------------------- counting


def test_outstanding_and_used_permits_both_count() -> None:
    s = state(window=[NOW + sec(10)], outstanding={"0": out(2, NOW + sec(600))})
    assert s.counted() == 3
    assert s.in_flight() == 2
    assert s.free(NOW) == 2


def test_expire_drops_passed_window_times_and_a_passed_pause() -> None:
    s = state(window=[NOW + sec(5), NOW - sec(1), NOW], paused_until=NOW)
    s.expire(NOW)
    assert s.window == [NOW + sec(5)]
    assert s.paused_until is None


def test_a_lapsed_lease_counts_as_used_at_its_end() -> None:
    s = state(outstanding={"0": out(2, NOW - sec(1)), "1": out(1, NOW + sec(1))})
    s.expire(NOW)
    assert list(s.outstanding) == ["1"]
    assert s.window == [NOW - sec(1) + SPAN] * 2


def test_nothing_free_while_paused() -> None:
    s = state(paused_until=NOW + sec(1))
    assert s.free(NOW) == 0
    assert s.free(NOW + sec(1)) == CONFIG.capacity


def test_slow_start_caps_what_may_be_outstanding() -> None:
    s = state(allowance=2, outstanding={"0": out(1, NOW + sec(600))})
    assert s.free(NOW) == 1
    s.allowance = 1
    assert s.free(NOW) == 0


def test_free_is_never_negative() -> None:
    s = state(window=[NOW + sec(1)] * 7)
    assert s.free(NOW) == 0


def test_next_wake_is_the_earliest_expiry_while_someone_waits() -> None:
    s = state(
        window=[NOW + sec(30), NOW + sec(40)],
        outstanding={"0": out(1, NOW + sec(20))},
        paused_until=NOW + sec(50),
    )
    assert s.next_wake() is None  # nobody waits
    s.queue = [req("r1", "a", 1)]
    assert s.next_wake() == NOW + sec(20)
    assert state(queue=[req("r1", "a", 1)]).next_wake() is None  # nothing to wait for


# ---------------------------------------------------------------- granting


def test_issue_books_each_grant_in_the_deals_order() -> None:
    s = state(queue=[req("a1", "a", 3, lease_seconds=30), req("b1", "b", 1)], next_grant=7)
    issued = s.issue({"b1": 1, "a1": 2}, NOW)
    assert [(i.grant.grant_id, i.grant.request_id, i.grant.count) for i in issued] == [
        ("7", "b1", 1),
        ("8", "a1", 2),
    ]
    assert s.next_grant == 9
    assert s.outstanding["8"] == Outstanding(
        request_id="a1", pool="a", count=2, lease_until=NOW + sec(30)
    )
    # Fully served requests leave the queue; the rest waits for what is left.
    assert [(r.request_id, r.count) for r in s.queue] == [("a1", 1)]
    assert s.stats.granted == 3


def test_an_undeliverable_grant_is_taken_back_with_its_requesters_requests() -> None:
    s = state(queue=[req("a1", "a", 3), req("b1", "b", 2)])
    issued = s.issue({"a1": 2, "b1": 2}, NOW)
    s.queue.append(req("a1-again", "a", 1).model_copy(update={"requester": "batch/a1"}))
    s.undeliverable(issued[0])
    assert list(s.outstanding) == [issued[1].grant.grant_id]
    assert s.stats.granted == 2
    assert s.queue == []


def test_a_round_deals_then_books() -> None:
    s = state(queue=[req("a1", "a", 4), req("b1", "b", 4)])
    dealt = deal(s.queue, s.free(NOW), s.last_pool)
    s.issue(dealt.counts, NOW)
    assert s.counted() == CONFIG.capacity
    assert s.free(NOW) == 0
    assert sum(r.count for r in s.queue) == 3


# ---------------------------------------------------------------- messages


def test_an_announcement_holds_until_its_ttl() -> None:
    s = state()
    s.announce(PermitIntent(pool="a", ttl_seconds=5), NOW)
    assert s.intents == {"a": NOW + sec(5)}
    s.announce(PermitIntent(pool="a", expecting=False), NOW)
    assert s.intents == {}


def test_an_announcement_its_request_overtook_is_ignored() -> None:
    s = state(queue=[req("a1", "a", 1)])
    s.announce(PermitIntent(pool="a"), NOW)
    s.outstanding = {"0": out(1, NOW + sec(600), pool="b")}
    s.announce(PermitIntent(pool="b"), NOW)
    assert s.intents == {}


def test_a_request_settles_its_announcement() -> None:
    s = state(intents={"a": NOW + sec(5), "b": NOW + sec(5)})
    s.enqueue(req("a1", "a", 2), NOW)
    assert list(s.intents) == ["b"]


def test_announcements_hold_a_busy_spell_for_five_seconds_at_most() -> None:
    s = state()
    s.enqueue(req("a1", "a", 2), NOW)
    s.announce(PermitIntent(pool="b"), NOW)
    assert s.announcement_hold(NOW) == NOW + sec(5)
    # A new pool announces itself every second: the hold does not move.
    for i in range(1, 5):
        s.announce(PermitIntent(pool=f"p{i}"), NOW + sec(i))
        assert s.announcement_hold(NOW + sec(i)) == NOW + sec(5)
    s.announce(PermitIntent(pool="late"), NOW + sec(5))
    assert s.announcement_hold(NOW + sec(5)) is None
    # Idle again (the window and the queue empty): the next spell may hold again.
    s.queue, s.intents = [], {}
    s.enqueue(req("c1", "c", 1), NOW + sec(100))
    s.announce(PermitIntent(pool="d"), NOW + sec(100))
    assert s.announcement_hold(NOW + sec(100)) == NOW + sec(105)


def test_no_hold_without_a_waiting_request_or_an_announcement() -> None:
    s = state()
    s.announce(PermitIntent(pool="b"), NOW)
    assert s.announcement_hold(NOW) is None
    s = state(queue=[req("a1", "a", 1)])
    assert s.announcement_hold(NOW) is None


def test_the_first_request_after_an_idle_spell_is_held_for_the_margin() -> None:
    s = state()
    s.enqueue(req("a1", "a", 2), NOW)
    assert s.hold_until == NOW + sec(CONFIG.margin_seconds)
    s.hold_until = None
    s.enqueue(req("b1", "b", 2), NOW + sec(1))
    assert s.hold_until is None  # not idle: a request is waiting


def test_a_resent_request_replaces_the_queued_one() -> None:
    s = state(queue=[req("a1", "a", 5), req("b1", "b", 1)])
    s.enqueue(req("a1", "a", 2), NOW)
    assert [(r.request_id, r.count) for r in s.queue] == [("b1", 1), ("a1", 2)]
    s.cancel("b1")
    assert [r.request_id for r in s.queue] == ["a1"]


def test_used_permits_count_from_when_each_create_finished() -> None:
    s = state(outstanding={"0": out(3, NOW + sec(600))})
    done = [NOW - sec(2)]
    assert s.record_used(PermitsUsed(grant_id="0", done_at=done, unused=1), NOW)
    # One finished at a known time; the other spent one counts from now; the
    # unused one leaves at once.
    assert s.window == [NOW - sec(2) + SPAN, NOW + SPAN]
    assert s.outstanding == {}
    assert s.stats.used == 2
    assert not s.record_used(PermitsUsed(grant_id="0"), NOW)  # a duplicate report


def test_slow_start_restarts_on_a_failure_and_doubles_back_to_full() -> None:
    s = state(outstanding={str(i): out(1, NOW + sec(600)) for i in range(4)})
    s.record_used(PermitsUsed(grant_id="0", failed=1, done_at=[NOW]), NOW)
    assert s.allowance == 1
    assert s.stats.failed == 1
    s.record_used(PermitsUsed(grant_id="1", done_at=[NOW]), NOW)
    assert s.allowance == 2
    s.record_used(PermitsUsed(grant_id="2", done_at=[NOW]), NOW)
    assert s.allowance == 4
    s.record_used(PermitsUsed(grant_id="3", done_at=[NOW]), NOW)
    assert s.allowance is None  # 8 >= capacity 5: no cap any more


def test_a_429_pauses_for_the_longest_retry_after_and_restarts_slowly() -> None:
    s = state()
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=10), NOW)
    s.record_rate_limited(RateLimitedReport(pool="b", retry_after_seconds=3), NOW)
    assert s.paused_until == NOW + sec(10)
    assert s.allowance == 1
    assert s.stats.rate_limited_reports == 2


@pytest.mark.parametrize("seconds", [1e12, float("inf"), float("nan"), -5.0, 86400.0])
def test_any_retry_after_pauses_at_most_the_cap_and_never_raises(seconds: float) -> None:
    # A report from any worker (an older one included) may carry anything.
    s = state()
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=seconds), NOW)
    assert s.paused_until is None or NOW <= s.paused_until <= NOW + sec(MAX_RETRY_AFTER_SECONDS)
    assert s.allowance == 1
    assert s.stats.rate_limited_reports == 1
    assert LedgerState.model_validate(s.to_json_dict()) == s  # and it still carries over


def test_a_pause_says_why_and_ends_with_its_reason() -> None:
    s = state()
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=10), NOW)
    assert s.paused_until == NOW + sec(10)
    assert s.paused_reason is not None
    assert "429" in s.paused_reason and "'a'" in s.paused_reason
    s.expire(NOW + sec(10))
    assert s.paused_until is None and s.paused_reason is None


def test_only_a_pause_longer_than_the_window_is_news_and_told_once() -> None:
    s = state(queue=[req("r1", "b", 2)], outstanding={"g": out(1, NOW + sec(600), pool="c")})
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=30), NOW)
    assert s.pause_news(NOW) is None  # within a window: the ledger just waits
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=300), NOW)
    assert s.pause_news(NOW) == NOW + sec(300)
    assert s.held_pools(also="a") == ["a", "b", "c"]
    assert s.pause_news(NOW) is None  # told already
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=330), NOW)
    assert s.pause_news(NOW) is None  # extended by less than a window
    s.record_rate_limited(RateLimitedReport(pool="a", retry_after_seconds=400), NOW)
    assert s.pause_news(NOW) == NOW + sec(400)


def test_the_state_survives_continue_as_new_whole() -> None:
    s = state(
        queue=[req("a1", "a", 2)],
        outstanding={"0": out(1, NOW + sec(600))},
        window=[NOW + sec(3)],
        paused_until=NOW + sec(4),
        intents={"b": NOW + sec(5)},
        allowance=2,
        next_grant=1,
        last_pool="a",
    )
    s.stats.granted = 3
    assert LedgerState.model_validate(s.to_json_dict()) == s


def test_the_ledger_view_says_when_a_waiting_request_gets_permits_next() -> None:
    """`devicepool apply --wait` shows it ("next in 34 s")."""
    from devicepool.workflows.ledger.state import LedgerView

    s = LedgerState(config=LedgerConfig(capacity=1, window_seconds=60, margin_seconds=0))
    assert LedgerView.of("a", s).next_permit_at is None  # nobody waits
    s.enqueue(PermitRequest(request_id="r1", requester="w", pool="p", count=2), NOW)
    (issued,) = s.issue({"r1": 1}, NOW)
    s.record_used(PermitsUsed(grant_id=issued.grant.grant_id, done_at=[NOW]), NOW)
    assert LedgerView.of("a", s).next_permit_at == NOW + timedelta(seconds=60)
