"""The lease book, pure: never two holders of a member; tickets served first come, first
served; an ended lease stays ended (the id is the fencing token); expiry, idle timeout,
unclaimed offers and lost members end leases; ticket waits end at their deadline."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from devicepool.api.v1beta1 import LeaseSpec
from devicepool.workflows.reconciler.lease_messages import LeaseRequest
from devicepool.workflows.reconciler.lease_records import (
    Candidate,
    EndReason,
    Lease,
    NotGranted,
    Queued,
)
from devicepool.workflows.reconciler.leases import (
    ASKED_KEPT,
    CLAIM_WINDOW,
    GIVEN_BACK_KEPT,
    LeaseBook,
)

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
RULES = LeaseSpec.model_validate(
    {"maxDuration": "1h", "idleTimeout": "5m", "queue": {"max": 3, "maxWait": "5m"}}
)


def ids():
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def members(*names: str, **labels: str) -> list[Candidate]:
    return [Candidate(n, {"device": n, **labels}) for n in names]


def ask(
    book, free, *, now=T0, wait=0, selector=None, holder="h", duration=600, new_id=None, **more
):
    """`book.request` of a lease (`more`: its other keywords, `ask`, `autoscaled`)."""
    return book.request(
        candidates=free,
        selector=selector or {},
        holder=holder,
        duration=timedelta(seconds=duration),
        wait=timedelta(seconds=wait),
        now=now,
        rules=RULES,
        new_id=new_id or ids(),
        **more,
    )


def test_a_free_member_is_granted_and_then_busy():
    book, new_id = LeaseBook(), ids()
    free = members("a", "b")
    first = ask(book, free, new_id=new_id)
    second = ask(book, free, new_id=new_id)
    third = ask(book, free, new_id=new_id)
    assert isinstance(first, Lease) and isinstance(second, Lease)
    assert {first.device, second.device} == {"a", "b"}
    assert isinstance(third, NotGranted) and not third.full
    assert first.expires_at == T0 + timedelta(seconds=600)


def test_a_selector_picks_only_matching_members():
    book = LeaseBook()
    free = [Candidate("a", {"gpu": "no"}), Candidate("b", {"gpu": "yes"})]
    lease = ask(book, free, selector={"gpu": "yes"})
    assert isinstance(lease, Lease) and lease.device == "b"
    assert isinstance(ask(book, free, selector={"gpu": "yes"}), NotGranted)


def test_tickets_are_served_first_come_first_served_and_claimed():
    book, new_id = LeaseBook(), ids()
    held = ask(book, members("a"), new_id=new_id)
    assert isinstance(held, Lease)
    q1 = ask(book, members("a"), wait=60, holder="first", new_id=new_id)
    q2 = ask(book, members("a"), wait=60, holder="second", new_id=new_id)
    assert isinstance(q1, Queued) and isinstance(q2, Queued)
    assert (q1.position, q2.position) == (1, 2)
    book.release(held.id, now=T0 + timedelta(seconds=5))
    (offer,) = book.assign(members("a"), now=T0 + timedelta(seconds=5), rules=RULES, new_id=new_id)
    assert offer.holder == "first" and not offer.claimed
    # A newcomer does not overtake the second ticket once the first lets go.
    claimed = book.claim(q1.ticket.id, now=T0 + timedelta(seconds=6), rules=RULES)
    assert claimed is not None and claimed.claimed
    assert claimed.expires_at == T0 + timedelta(seconds=606)


def test_a_full_queue_refuses_and_a_wait_is_capped_by_max_wait():
    book, new_id = LeaseBook(), ids()
    ask(book, members("a"), new_id=new_id)
    tickets = [ask(book, [], wait=3600, new_id=new_id) for _ in range(3)]
    assert all(isinstance(t, Queued) for t in tickets)
    assert tickets[0].ticket.deadline == T0 + timedelta(minutes=5)  # maxWait, not 1h
    full = ask(book, [], wait=60, new_id=new_id)
    assert isinstance(full, NotGranted) and full.full


def test_an_offer_never_claimed_goes_to_the_next_ticket():
    book, new_id = LeaseBook(), ids()
    ask(book, [], wait=60, holder="dead", new_id=new_id)
    ask(book, [], wait=120, holder="alive", new_id=new_id)
    (offer,) = book.assign(members("a"), now=T0, rules=RULES, new_id=new_id)
    assert offer.holder == "dead"
    later = T0 + CLAIM_WINDOW
    (ended,) = book.reap(now=later, rules=RULES, members={"a"})
    assert ended.reason == EndReason.UNCLAIMED
    (offer2,) = book.assign(members("a"), now=later, rules=RULES, new_id=new_id)
    assert offer2.holder == "alive"


def test_expiry_idle_and_lost_members_end_leases():
    book, new_id = LeaseBook(), ids()
    long = ask(book, members("a"), duration=7200, new_id=new_id)  # capped at maxDuration
    short = ask(book, members("b"), duration=60, new_id=new_id)
    lost = ask(book, members("c"), duration=600, new_id=new_id)
    assert long.expires_at == T0 + timedelta(hours=1)
    # Unknown members (a failed listing): nothing is taken for lost.
    assert book.reap(now=T0 + timedelta(seconds=30), rules=RULES, members=None) == []
    ended = book.reap(now=T0 + timedelta(seconds=61), rules=RULES, members={"a", "b"})
    assert {(e.id, e.reason) for e in ended} == {
        (short.id, EndReason.EXPIRED),
        (lost.id, EndReason.DEVICE_LOST),
    }
    # Silent past idleTimeout: ended though its time is not up.
    (idle,) = book.reap(now=T0 + timedelta(minutes=5), rules=RULES, members={"a"})
    assert (idle.id, idle.reason) == (long.id, EndReason.IDLE)
    # Every end no holder asked for counts, a lost member's too (as `LeaseExpired` says it).
    assert book.expired_total == 3


def test_renew_moves_the_clocks_never_past_max_duration():
    book = LeaseBook()
    lease = ask(book, members("a"), duration=600)
    at = T0 + timedelta(minutes=4)
    renewed = book.renew(lease.id, duration=None, now=at, rules=RULES)
    assert renewed is not None and renewed.expires_at == at + timedelta(seconds=600)
    late = T0 + timedelta(minutes=55)
    renewed = book.renew(lease.id, duration=timedelta(minutes=30), now=late, rules=RULES)
    assert renewed is not None and renewed.expires_at == T0 + timedelta(hours=1)


def test_an_ended_lease_stays_ended_release_is_idempotent():
    book, new_id = LeaseBook(), ids()
    lease = ask(book, members("a"), new_id=new_id)
    first = book.release(lease.id, now=T0)
    again = book.release(lease.id, now=T0 + timedelta(seconds=1))
    assert first is not None and again is not None
    assert again.reason == EndReason.RELEASED and again.at == T0
    # The device is leased again: the old id renews nothing.
    newer = ask(book, members("a"), new_id=new_id)
    assert isinstance(newer, Lease) and newer.id != lease.id
    assert book.renew(lease.id, duration=None, now=T0, rules=RULES) is None
    assert book.release("never", now=T0) is None


def test_a_ticket_ends_at_its_deadline():
    book = LeaseBook()
    queued = ask(book, [], wait=30)
    assert isinstance(queued, Queued)
    (ended,) = book.reap(now=T0 + timedelta(seconds=30), rules=RULES, members=set())
    assert ended.reason == EndReason.TIMED_OUT and ended.ticket == queued.ticket.id
    assert book.ended_as(queued.ticket.id) == ended
    assert book.empty()


def test_the_next_deadline_is_the_earliest_end():
    book, new_id = LeaseBook(), ids()
    assert book.next_deadline(RULES) is None
    ask(book, members("a"), duration=120, new_id=new_id)
    assert book.next_deadline(RULES) == T0 + timedelta(seconds=120)
    ask(book, [], wait=30, new_id=new_id)
    assert book.next_deadline(RULES) == T0 + timedelta(seconds=30)


class LeaseMachine(RuleBasedStateMachine):
    """Random requests, releases, renews, claims, time and members coming and going."""

    def __init__(self) -> None:
        super().__init__()
        self.book = LeaseBook()
        self.now = T0
        self.new_id = ids()
        self.alive = {"a", "b", "c"}
        self.ever_held: dict[str, str] = {}  # lease id -> device
        self.ended: set[str] = set()
        self.order: list[str] = []  # tickets in the order they were made

    def free(self) -> list[Candidate]:
        return [Candidate(d, {"device": d, "even": str(ord(d) % 2)}) for d in sorted(self.alive)]

    @rule(
        wait=st.sampled_from([0, 30, 600]),
        selector=st.sampled_from([{}, {"even": "0"}, {"even": "1"}, {"device": "a"}]),
    )
    def request(self, wait, selector):
        before = [t.id for t in self.book.tickets]
        outcome = ask(
            self.book, self.free(), now=self.now, wait=wait, selector=selector, new_id=self.new_id
        )
        if isinstance(outcome, Lease):
            assert outcome.device in self.alive
            self.ever_held[outcome.id] = outcome.device
        elif isinstance(outcome, Queued):
            self.order.append(outcome.ticket.id)
            assert outcome.ticket.id not in before

    @rule(
        wait=st.sampled_from([0, 30, 600]),
        selector=st.sampled_from([{}, {"even": "0"}, {"device": "a"}]),
    )
    def request_by_ask(self, wait, selector):
        # A `lease_ask`: the asker's id names the ticket; its offer needs no claim.
        ask_id = f"ask{len(self.order) + len(self.ever_held)}-{self.now.timestamp():.0f}"
        if self.book.knows(ask_id):
            return
        outcome = self.book.request(
            candidates=self.free(),
            selector=selector,
            holder="asker",
            duration=timedelta(seconds=600),
            wait=timedelta(seconds=wait),
            now=self.now,
            rules=RULES,
            new_id=self.new_id,
            ask=ask_id,
        )
        if isinstance(outcome, Lease):
            assert outcome.ticket == ask_id and outcome.claimed
            self.ever_held[outcome.id] = outcome.device
        elif isinstance(outcome, Queued):
            assert outcome.ticket.id == ask_id
            self.order.append(ask_id)

    @precondition(lambda self: self.book.leases)
    @rule(data=st.data())
    def release(self, data):
        lease = data.draw(st.sampled_from(self.book.leases))
        self.book.release(lease.id, now=self.now)
        self.ended.add(lease.id)

    @precondition(lambda self: self.book.leases)
    @rule(data=st.data())
    def renew(self, data):
        lease = data.draw(st.sampled_from(self.book.leases))
        assert self.book.renew(lease.id, duration=None, now=self.now, rules=RULES) is not None

    @rule(seconds=st.sampled_from([1, 29, 31, 301, 700]))
    def time_passes(self, seconds):
        self.now += timedelta(seconds=seconds)
        for e in self.book.reap(now=self.now, rules=RULES, members=self.alive):
            if e.device:
                self.ended.add(e.id)

    @rule(device=st.sampled_from(["a", "b", "c"]))
    def member_toggles(self, device):
        self.alive ^= {device}

    @rule()
    def assign_and_claim(self):
        offers = self.book.assign(self.free(), now=self.now, rules=RULES, new_id=self.new_id)
        for offer in offers:
            self.ever_held[offer.id] = offer.device
            assert not offer.claimed  # an ask's ticket too: claimed by its asker
            assert self.book.claim(offer.ticket, now=self.now, rules=RULES) is not None

    @invariant()
    def never_two_holders(self):
        devices = [x.device for x in self.book.leases]
        assert len(devices) == len(set(devices))

    @invariant()
    def ended_stays_ended(self):
        held = {x.id for x in self.book.leases}
        assert not (held & self.ended)
        for lease_id in self.ended:
            assert self.book.renew(lease_id, duration=None, now=self.now, rules=RULES) is None

    @invariant()
    def tickets_keep_their_order(self):
        waiting = [t.id for t in self.book.tickets]
        assert waiting == [t for t in self.order if t in waiting]

    @invariant()
    def no_ticket_waits_for_a_free_match_after_assign(self):
        # After `assign`, a ticket waits only if no unleased free member matches it; checked
        # on a copy so the machine's own order of steps is unchanged.
        copy = self.book.model_copy(deep=True)
        copy.assign(self.free(), now=self.now, rules=RULES, new_id=ids())
        held = copy.devices()
        for t in copy.tickets:
            assert not any(
                c.id not in held and all(c.labels.get(k) == v for k, v in t.selector.items())
                for c in self.free()
            )

    @invariant()
    def queue_within_its_max(self):
        assert len(self.book.tickets) <= RULES.queue.max


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@pytest.mark.parametrize("bad", [{"maxDuration": "0s"}, {"queue": {"max": -1}}, {"onRelease": "x"}])
def test_bad_lease_specs_are_refused(bad):
    with pytest.raises(ValueError):
        LeaseSpec.model_validate(bad)


@pytest.mark.parametrize("holder", ["a\nb", "tab\there", "\x1b[31mred"])
def test_a_holder_is_one_printable_line(holder):
    with pytest.raises(ValueError, match="one line of printable characters"):
        LeaseRequest(holder=holder)
    assert LeaseRequest(holder="ci@runner-7:4242").holder == "ci@runner-7:4242"


def test_a_selector_is_a_few_pairs():
    LeaseRequest(selector={f"k{i}": "v" for i in range(16)})
    with pytest.raises(ValueError, match="at most 16 key=value pairs"):
        LeaseRequest(selector={f"k{i}": "v" for i in range(17)})


def test_a_holder_gives_up_a_ticket_or_the_offer_it_had_and_again():
    book, new_id = LeaseBook(), ids()
    held = ask(book, members("a"), new_id=new_id)
    first = ask(book, [], wait=60, holder="first", new_id=new_id)
    second = ask(book, [], wait=60, holder="second", new_id=new_id)
    dropped = book.cancel(second.ticket.id, now=T0)
    assert dropped is not None and (dropped.reason, dropped.device) == (EndReason.CANCELLED, "")
    assert book.cancel(second.ticket.id, now=T0) is None  # gone; remembered as cancelled
    assert book.ended_as(second.ticket.id).reason == EndReason.CANCELLED
    book.release(held.id, now=T0)
    (offer,) = book.assign(members("a"), now=T0, rules=RULES, new_id=new_id)
    given_up = book.cancel(first.ticket.id, now=T0)
    # The offer ends unused: not an expiry, and nothing to replace.
    assert given_up is not None and (given_up.reason, given_up.device) == (EndReason.CANCELLED, "a")
    assert book.leases == [] and book.expired_total == 0
    assert book.ended_as(first.ticket.id).id == offer.id


def test_offers_not_claimed_are_withdrawn():
    book, new_id = LeaseBook(), ids()
    claimed = ask(book, members("a"), new_id=new_id)
    ask(book, [], wait=60, new_id=new_id)
    book.assign(members("a", "b"), now=T0, rules=RULES, new_id=new_id)
    (withdrawn,) = book.withdraw_offers(EndReason.POOL_DELETED, now=T0)
    assert withdrawn.device == "b" and [x.id for x in book.leases] == [claimed.id]


def test_the_book_remembers_what_a_lease_update_made_the_latest_only():
    book = LeaseBook()
    book.remember_asked("u-1", "lease-1")
    book.remember_asked("", "never")  # outside an update: nothing to remember
    assert (book.made_by("u-1"), book.made_by("u-2"), book.made_by("")) == ("lease-1", None, None)
    for i in range(ASKED_KEPT + 5):
        book.remember_asked("x" * 1000 + str(i), f"ticket-{i}")  # a long id: a short key
    assert len(book.asked) == ASKED_KEPT and book.made_by("u-1") is None
    assert book.made_by("x" * 1000 + str(ASKED_KEPT + 4)) == f"ticket-{ASKED_KEPT + 4}"
    assert {len(key) for key in book.asked} == {24}


def test_an_ask_is_found_by_its_own_id_granted_at_once_or_queued_and_offered():
    book, new_id = LeaseBook(), ids()
    held = ask(book, members("a"), holder="first", new_id=new_id, ask="ask-1")
    assert isinstance(held, Lease) and held.ticket == "ask-1" and held.claimed
    assert book.offer_for("ask-1") is held and book.knows("ask-1") and not book.knows("ask-2")
    queued = book.request(
        candidates=members("a"),
        selector={},
        holder="second",
        duration=timedelta(seconds=600),
        wait=timedelta(seconds=60),
        now=T0,
        rules=RULES,
        new_id=new_id,
        ask="ask-2",
    )
    assert isinstance(queued, Queued) and queued.ticket.id == "ask-2" and book.knows("ask-2")
    later = T0 + timedelta(seconds=5)
    book.release(held.id, now=later)
    (offer,) = book.assign(members("a"), now=later, rules=RULES, new_id=new_id)
    # Offered, as any ticket: an asker that died while it waited is not waited for long.
    assert offer.ticket == "ask-2" and not offer.claimed
    (unclaimed,) = book.reap(now=later + CLAIM_WINDOW, rules=RULES, members={"a"})
    assert unclaimed.reason == EndReason.UNCLAIMED and book.leases == []


def test_an_ask_turned_down_is_remembered_under_its_id():
    book = LeaseBook()
    said = book.refuse("ask-9", holder="h", refusal="Refused", message="no", now=T0)
    assert book.knows("ask-9") and book.ended_as("ask-9") == said
    # Kept under a reason every earlier build reads (a rollback still decodes the book).
    assert said.reason == EndReason.TIMED_OUT and said.refusal == "Refused" and not said.device
    # Given back by its id: nothing held, nothing changes.
    assert book.cancel("ask-9", now=T0) is None


def test_a_book_with_a_refused_ask_reads_on_a_build_without_refusals():
    # A rollback to a build before `lease_ask`: its `Ended` has no `refusal` and the same
    # reasons; the tolerant converter drops what it does not know.
    book = LeaseBook()
    book.refuse("ask-1", holder="h", refusal="NotGranted", message="none free", now=T0)
    dumped = book.model_dump(mode="json", by_alias=True)
    (entry,) = dumped["ended"]
    before = {"Released", "Expired", "IdleTimeout", "Unclaimed", "DeviceLost", "Replaced"}
    before |= {"PoolDeleted", "TimedOut", "Cancelled"}  # EndReason at 958824c
    assert entry["reason"] in before and entry["refusal"] == "NotGranted"
    del entry["refusal"]
    assert LeaseBook.model_validate(dumped).ended[0].reason == EndReason.TIMED_OUT


def test_give_backs_of_unknown_ids_are_kept_apart_and_bounded():
    book, new_id = LeaseBook(), ids()
    held = ask(book, members("a"), new_id=new_id)
    assert isinstance(held, Lease)
    book.release(held.id, now=T0)
    book.remember_given_back("ask-early")  # its ask, overtaken, changes nothing when it comes
    assert book.knows("ask-early")
    for n in range(GIVEN_BACK_KEPT):  # a stream of give-backs of ids nobody holds
        book.remember_given_back(f"junk-{n}")
    assert len(book.given_back) == GIVEN_BACK_KEPT and not book.knows("ask-early")
    ended = book.ended_as(held.id)  # the ends are not pushed out by them
    assert ended is not None and ended.reason == EndReason.RELEASED


def hold(book: LeaseBook, devices: list[str], *, rules: LeaseSpec, new_id) -> None:
    """Each of `devices` leased (9 minutes), in turn."""
    for device in devices:
        granted = book.request(
            candidates=members(device),
            selector={},
            holder=f"held-{device}",
            duration=timedelta(minutes=9),
            wait=timedelta(0),
            now=T0,
            rules=rules,
            new_id=new_id,
        )
        assert isinstance(granted, Lease) and granted.device == device


def queue(book: LeaseBook, selectors: list[dict[str, str]], rules: LeaseSpec, new_id) -> None:
    """A ticket `t<i>` for each selector, in order (nothing free: `candidates` empty)."""
    for i, selector in enumerate(selectors):
        queued = book.request(
            candidates=[],
            selector=selector,
            holder=f"t{i}",
            duration=timedelta(minutes=9),
            wait=timedelta(minutes=5),
            now=T0,
            rules=rules,
            new_id=new_id,
        )
        assert isinstance(queued, Queued)


class Counted(list):
    """Candidates that count how many times one is looked at."""

    looked = 0

    def __iter__(self):
        for candidate in super().__iter__():
            Counted.looked += 1
            yield candidate


def test_offering_to_a_long_queue_looks_at_each_candidate_a_few_times_not_per_ticket():
    # A busy pool: 300 devices, 250 held, 400 tickets that want a label none of the 50 free
    # has but the last 10 tickets. Each ask and give-back offers to the queue; looking at
    # every candidate for every ticket made a workflow task of a few dozen signals take
    # seconds, past the SDK's 2-s deadlock check, and the pool's task failed again each
    # time it was retried (bench/leases.py --devices 300 --clients 400).
    rules = LeaseSpec.model_validate({"queue": {"max": 500, "maxWait": "5m"}})
    book, new_id = LeaseBook(), ids()
    names = [f"d{i:03}" for i in range(300)]
    hold(book, names[:250], rules=rules, new_id=new_id)
    queue(book, [{"gpu": "yes"} if i >= 390 else {"gpu": "no"} for i in range(400)], rules, new_id)
    free = Counted([*members(*names[:250]), *members(*names[250:], gpu="yes")])
    Counted.looked = 0
    offers = book.assign(free, now=T0, rules=rules, new_id=new_id)
    assert [o.holder for o in offers] == [f"t{i}" for i in range(390, 400)]
    assert [o.device for o in offers] == names[250:260]
    assert Counted.looked <= 3 * len(free), Counted.looked  # (before: 400 times 300)


def test_a_device_listed_twice_is_offered_to_one_ticket_only():
    # A provider whose paging repeats an item lists a device twice; the offers must still
    # hand each device to one ticket (the queue's one look at what is free counts ids).
    book, new_id = LeaseBook(), ids()
    first = ask(book, [], wait=60, holder="first", new_id=new_id)
    second = ask(book, [], wait=60, holder="second", new_id=new_id)
    assert isinstance(first, Queued) and isinstance(second, Queued)
    offers = book.assign([*members("d1"), *members("d1")], now=T0, rules=RULES, new_id=new_id)
    assert [(o.holder, o.device) for o in offers] == [("first", "d1")]
    assert [t.holder for t in book.tickets] == ["second"]


def reference_offers(book: LeaseBook, candidates: list[Candidate]) -> list[tuple[str, str]]:
    """What `assign` must offer, the slow way: each ticket in turn takes the first
    candidate no lease holds (by id) that its selector matches."""
    held = {lease.device for lease in book.leases}
    offers = []
    for ticket in book.tickets:
        for candidate in candidates:
            if candidate.id not in held and all(
                candidate.labels.get(k) == v for k, v in ticket.selector.items()
            ):
                held.add(candidate.id)
                offers.append((ticket.holder, candidate.id))
                break
    return offers


@settings(max_examples=300, deadline=None)
@given(
    listed=st.lists(
        st.tuples(st.sampled_from(["d1", "d2", "d3", "d4"]), st.sampled_from(["x", "y"])),
        max_size=7,
    ),
    wants=st.lists(st.sampled_from([{}, {"gpu": "x"}, {"gpu": "y"}, {"gpu": "z"}]), max_size=6),
    held=st.sets(st.sampled_from(["d1", "d2", "d3", "d4"]), max_size=2),
)
def test_offers_are_each_ticket_in_turn_taking_the_first_free_match(listed, wants, held):
    # Devices listed twice, held ones, selectors nothing matches: `assign` (linear) offers
    # exactly what one ticket at a time would.
    rules = LeaseSpec.model_validate({"queue": {"max": 10, "maxWait": "5m"}})
    book, new_id = LeaseBook(), ids()
    hold(book, sorted(held), rules=rules, new_id=new_id)
    queue(book, wants, rules, new_id)
    candidates = [Candidate(device, {"device": device, "gpu": gpu}) for device, gpu in listed]
    expected = reference_offers(book, candidates)
    offers = book.assign(candidates, now=T0, rules=rules, new_id=new_id)
    assert [(o.holder, o.device) for o in offers] == expected


def test_a_refusal_without_a_wait_says_an_autoscaled_pool_grows_only_for_one_that_waits():
    """An autoscaled pool grows for a waiting ticket, not for an ask that would not wait:
    its refusal says so (and how to ask); a plain pool's stays as it is."""
    plain = ask(LeaseBook(), [])
    assert isinstance(plain, NotGranted)
    assert plain.message == "no ready device matching the selector is free"
    scaled = ask(LeaseBook(), [], autoscaled=True)
    assert isinstance(scaled, NotGranted) and not scaled.full
    assert scaled.message.startswith("no ready device matching the selector is free")
    assert "autoscaled" in scaled.message and "--wait" in scaled.message
    assert "\n" not in scaled.message
