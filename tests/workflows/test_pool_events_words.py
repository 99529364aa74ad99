"""Cloud phones' events in the provider's words (issue 43, item 14): over the BitBrowser Local
API a removal shuts a phone down (kept as a reserve, or retired: there is no delete) and a
create powers one on, so the pool says `ShutDown` and `PoweredOn`, not "terminated". Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from devicepool.activities.models import PoolSettings
from devicepool.worker.config import build_config
from devicepool.workflows.pool import events as pe
from devicepool.workflows.pool.slots import SlotBook
from devicepool.workflows.pool.state import PoolState
from devicepool.workflows.shared.protocol import BatchReport

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_scale_down_of_phones_says_they_were_shut_down() -> None:
    said = pe.terminations(surplus=["p1", "p2"], doomed=[], skipped={}, words=pe.PHONES)
    assert [(h.reason, h.message) for h in said] == [
        ("ShutDown", "shut down 2 phone(s): p1, p2 (kept powered off, as spec.reserve says)")
    ]
    # Elsewhere, as before: devices are terminated.
    [rest] = pe.terminations(surplus=["d1"], doomed=[], skipped={})
    assert (rest.reason, rest.message) == ("ScaledDown", "terminated 1 device(s): d1")


def test_a_phone_leaving_of_the_pools_accord_is_shut_down_too() -> None:
    said = pe.terminations(
        surplus=["p1"],
        doomed=["p2"],
        skipped={},
        reasons={"p1": "Drifted"},
        words=pe.PHONES,
    )
    assert [(h.reason, h.message) for h in said] == [
        ("Drifted", "shut down an older template's phone, replacement first: p1"),
        ("Removed", "shut down 1 failed phone(s): p2"),
    ]


def test_phones_a_batch_brings_up_are_powered_on() -> None:
    book = SlotBook()
    book.open_batch("b1", 1, [0, 1], NOW)
    report = BatchReport(workflow_id="b1", slots=[0, 1], created={0: "p0", 1: "p1"})
    [said] = pe.batches_settled(book, [report], words=pe.PHONES)
    assert (said.reason, said.message) == ("PoweredOn", "powered on 2 phone(s): p0, p1")
    starting = pe.batch_started(2, replacement=False, words=pe.PHONES)
    assert (starting.reason, starting.message) == ("Creating", "powering on 2 phone(s)")


def test_a_pools_removals_are_said_in_its_providers_words() -> None:
    state = PoolState()
    went = state.take_terminations(
        ["p1"], only_if_idle={"p1"}, failed={}, skipped={}, devices=[], words=pe.PHONES
    )
    assert [e.reason for e in went.events] == ["ShutDown"]


def test_the_worker_tells_the_pools_which_accounts_are_cloud_phones() -> None:
    config = build_config(
        {
            "accounts": {
                "phones": {"api": "bitbrowser", "node": "node-1"},
                "default": {"baseUrl": "http://127.0.0.1:8088", "apiKeyEnv": "K"},
            }
        },
        env={"K": "k-0003"},
    )
    assert config.settings.phone_accounts == ["phones"]
    assert pe.words_of(config.settings, "phones") is pe.PHONES
    assert pe.words_of(config.settings, "default") is pe.REST


def test_phones_a_batch_brought_up_are_ready_as_phones() -> None:
    report = BatchReport(
        workflow_id="b1", slots=[0, 1, 2], ready=["p0", "p1"], failed_devices={"p2": "timeout"}
    )
    said = PoolState().take_report(
        report, region="r", settings=PoolSettings(), now=NOW, words=pe.PHONES
    )
    assert [(h.reason, h.message) for h in said.events] == [
        ("Ready", "2 phone(s) ready"),
        ("BootFailed", "1 phone(s) never became ready, removed: p2 (timeout)"),
    ]


def test_a_pass_that_starts_two_batches_says_creating_once() -> None:
    # 30 replicas start as batches of 20 and 10: one "Creating" row, not two at one age
    # (`describe` after an `apply --wait` timeout read as the event said twice).
    said = pe.batches_started([(4, True), (20, False), (10, False)])
    assert [(h.reason, h.message) for h in said] == [
        ("Creating", "creating 4 replacement device(s)"),
        ("Creating", "creating 30 device(s) in 2 batches"),
    ]
    [one] = pe.batches_started([(3, False)], words=pe.PHONES)
    assert one.message == "powering on 3 phone(s)"
    assert pe.batches_started([]) == []
