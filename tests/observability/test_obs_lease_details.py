"""The Web UI details of a pool with leases: the kind's own Markdown, then `Leasing.details()`
(the shell writes `kind.details() + leasing.details()`), rendered as the UI renders Markdown.

Pure: a `Leasing` over a fake host holding a book; the Markdown rendered by markdown-it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from markdown_it import MarkdownIt

from devicepool.api.browserpool.v1alpha1 import BrowserPoolStatus
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec
from devicepool.api.v1alpha1 import Condition, ConditionStatus, DevicePoolStatus
from devicepool.api.v1beta1 import DevicePoolSpec, LeaseSpec
from devicepool.workflows.browserpool.publish import details as browser_details
from devicepool.workflows.pool.status import details as pool_details
from devicepool.workflows.reconciler.lease_records import Candidate, Lease
from devicepool.workflows.reconciler.leases import LeaseBook
from devicepool.workflows.reconciler.leasing import Leasing

T0 = datetime(2026, 12, 5, 16, 0, tzinfo=UTC)
RULES = LeaseSpec()


def leasing(book: LeaseBook) -> Leasing:
    return Leasing(SimpleNamespace(s=SimpleNamespace(leases=book)))  # type: ignore[arg-type]


def book_with(holders: list[str], *, waiting: int = 0) -> LeaseBook:
    book, n = LeaseBook(), iter(range(1000))
    members = [Candidate(f"dev-{i}", {}) for i in range(len(holders))]
    for holder in holders:
        got = book.request(
            candidates=members,
            selector={},
            holder=holder,
            duration=timedelta(minutes=10),
            wait=timedelta(0),
            now=T0,
            rules=RULES,
            new_id=lambda: f"l{next(n)}",
        )
        assert isinstance(got, Lease)
    for i in range(waiting):
        book.request(
            candidates=members,
            selector={},
            holder=f"waiter-{i}",
            duration=timedelta(minutes=10),
            wait=timedelta(seconds=60),
            now=T0 + timedelta(seconds=5 + i),
            rules=RULES,
            new_id=lambda: f"t{next(n)}",
        )
    return book


def pool_markdown(*, conditions: bool) -> str:
    spec = DevicePoolSpec.model_validate(
        {"platform": "android", "region": "us-west", "replicas": 2}
    )
    status = DevicePoolStatus(
        ready_devices=2,
        conditions=[Condition(type="Ready", status=ConditionStatus.TRUE, reason="AllReady")]
        if conditions
        else [],
    )
    return pool_details("p1", spec, 1, status)


def browser_markdown() -> str:
    spec = BrowserPoolSpec.model_validate({"replicas": 2})
    return browser_details("b1", spec, 1, BrowserPoolStatus(ready_profiles=2))


def items(html: str) -> list[str]:
    """The text of each `<li>` of the rendered HTML."""
    return [part.split("</li>")[0] for part in html.split("<li>")[1:]]


@pytest.mark.parametrize(
    "kind_markdown",
    [
        pytest.param(lambda: pool_markdown(conditions=True), id="DevicePool-conditions-list"),
        pytest.param(lambda: pool_markdown(conditions=False), id="DevicePool-figures-only"),
        pytest.param(browser_markdown, id="BrowserPool-all-fine"),
    ],
)
def test_the_leases_are_a_section_of_their_own_after_the_kinds_details(
    kind_markdown: Any,
) -> None:
    own = kind_markdown()
    leases = leasing(book_with(["ci-7", "bot"], waiting=1)).details()
    html = MarkdownIt().render(own + leases)
    # Not run into the kind's last list item or paragraph: a paragraph of its own.
    assert "<p><strong>Leases</strong> · 2 held · 1 waiting" in html
    lease_items = [i for i in items(html) if "dev-" in i]
    assert len(lease_items) == 2
    assert all("Leases" not in i for i in items(html))
    assert "<code>dev-0</code> · <code>ci-7</code> · until 2026-12-05 16:10:00Z" in lease_items[0]
    # The kind's own details are unchanged by the section after them.
    assert MarkdownIt().render(own) in html


def test_the_oldest_ticket_is_said_with_when_it_was_made() -> None:
    text = leasing(book_with(["a"], waiting=2)).details()
    assert "1 held · 2 waiting (the oldest since 16:00:05Z)" in text


def test_an_offer_not_yet_claimed_says_so() -> None:
    book = book_with(["a"], waiting=1)
    book.assign([Candidate("dev-9", {})], now=T0, rules=RULES, new_id=lambda: "o1")
    html = MarkdownIt().render(leasing(book).details())
    assert "<code>dev-9</code> · <code>waiter-0</code> · offered, not yet claimed" in html


def test_a_holder_cannot_break_the_markdown() -> None:
    # A holder is free text up to 128 characters: its newlines, backticks and Markdown stay
    # inside one code span on its own line.
    book = book_with(["evil`\n\n# heading\n- [x](javascript:alert(1))"])
    html = MarkdownIt().render(leasing(book).details())
    assert "<h1>" not in html and "<a " not in html
    (item,) = items(html)
    assert "<code>evil # heading - [x](javascript:alert(1))</code>" in item


def test_many_leases_are_cut_short() -> None:
    text = leasing(book_with([f"h{i}" for i in range(25)])).details()
    assert text.count("\n- `dev-") == 20
    assert text.rstrip().endswith("- and 5 more")


def test_nothing_while_the_book_is_empty() -> None:
    assert leasing(LeaseBook()).details() == ""


def test_the_figures_say_how_many_are_leased_only_while_some_are() -> None:
    spec = DevicePoolSpec.model_validate(
        {"platform": "android", "region": "us-west", "replicas": 2}
    )
    assert "leased" not in pool_details("p1", spec, 1, DevicePoolStatus(ready_devices=2))
    held = pool_details("p1", spec, 1, DevicePoolStatus(ready_devices=2, leased_devices=1))
    assert "leased        1" in held
    browser = BrowserPoolSpec.model_validate({"replicas": 2})
    assert "leased" not in browser_details("b1", browser, 1, BrowserPoolStatus(ready_profiles=2))
    shown = browser_details("b1", browser, 1, BrowserPoolStatus(ready_profiles=2, leased_devices=2))
    assert "leased   2" in shown
