"""The count `devicepool apply -f DIR/` ends with (`client._apply.tally`)."""

from __future__ import annotations

from devicepool.client._apply import tally
from devicepool.client.errors import BadInput, DevicePoolError
from devicepool.workflows.pool.messages import Accepted, ApplyResult


def accepted(result: ApplyResult) -> Accepted:
    return Accepted(generation=1, replicas=2, result=result)


def test_names_only_the_outcomes_that_happened_in_kubectls_words() -> None:
    answers = [accepted(ApplyResult.CREATED)] * 3 + [accepted(ApplyResult.UNCHANGED)]
    assert tally(answers, 4) == "4 pools: 3 created, 1 unchanged"
    assert tally([accepted(ApplyResult.CONFIGURED)], 1) == "1 pool: 1 configured"


def test_refused_and_failed_pools_count_as_failed_and_unsent_ones_are_said() -> None:
    answers: list[Accepted | DevicePoolError] = [
        accepted(ApplyResult.CREATED),
        BadInput('pool "b" rejected the change: spec.platform: cannot change'),
        accepted(ApplyResult.CONFIGURED),
        DevicePoolError("Temporal: the history service is down"),
    ]
    assert tally(answers, 10) == (
        "10 pools: 1 created, 1 configured, 2 failed, 6 not sent (stopped after the failure)"
    )


def test_an_answer_from_a_worker_without_result_is_read_from_its_generation() -> None:
    old = [Accepted(generation=1, replicas=2), Accepted(generation=4, replicas=2)]
    assert tally(old, 2) == "2 pools: 1 created, 1 configured"
