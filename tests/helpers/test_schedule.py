"""The xdist schedule from measured durations (schedule.py): slowest first, shared fixtures kept."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.schedule import (
    CHUNK_SECONDS,
    WHOLE_FOLDERS,
    Collected,
    load_durations,
    merge_durations,
    plain_id,
    schedule,
)


def item(name: str, *, module: str = "tests/a/test_a.py", shares: bool = False) -> Collected:
    return Collected(nodeid=f"{module}::{name}", module=module, shares=shares, server=False)


def test_units_go_out_slowest_first_and_unknown_server_tests_before_unknown_others() -> None:
    tests = [
        item("quick"),
        item("slow"),
        Collected("tests/b/test_b.py::new", "tests/b/test_b.py", shares=False, server=True),
        item("middling"),
        item("new_and_pure"),
    ]
    durations = {"tests/a/test_a.py::quick": 0.6, "tests/a/test_a.py::slow": 40.0}
    durations["tests/a/test_a.py::middling"] = 3.0

    order = schedule(tests, durations)

    assert [tests[i].nodeid.rsplit(":", 1)[1] for i, _ in order] == [
        "slow",
        "new",  # a server test not measured yet: 10 s
        "middling",
        "quick",
        "new_and_pure",
    ]
    assert {group for _, group in order} == {None}


def test_a_modules_shared_fixture_keeps_its_tests_together_in_their_order() -> None:
    shared = "tests/s/test_stack.py"
    tests = [
        item("one", module=shared, shares=True),
        item("alone"),
        item("two", module=shared, shares=True),
    ]
    durations = {f"{shared}::one": 5.0, f"{shared}::two": 6.0, "tests/a/test_a.py::alone": 8.0}

    order = schedule(tests, durations)

    assert order == [(0, shared), (2, shared), (1, None)]  # 11 s together, before 8 s


def test_a_module_longer_than_a_chunk_is_cut_into_even_chunks_each_in_module_order() -> None:
    shared = "tests/s/test_long.py"
    times = [60.0, 20.0, 50.0, 40.0, 6.0]
    assert CHUNK_SECONDS < sum(times) <= 2 * CHUNK_SECONDS
    tests = [item(f"t{k}", module=shared, shares=True) for k in range(len(times))]
    durations = {t.nodeid: s for t, s in zip(tests, times, strict=True)}

    order = schedule(tests, durations)

    chunks: dict[str | None, list[int]] = {}
    for index, group in order:
        chunks.setdefault(group, []).append(index)
    assert set(chunks) == {f"{shared}#1", f"{shared}#2"}
    for indices in chunks.values():
        assert indices == sorted(indices)  # a chunk runs in the module's order
    loads = sorted(sum(times[i] for i in indices) for indices in chunks.values())
    assert loads == [86.0, 90.0]  # 60+20+6 and 50+40
    # Each chunk's tests are handed out one after the other, the longer chunk first.
    assert [group for _, group in order] == [f"{shared}#2"] * 2 + [f"{shared}#1"] * 3


def test_a_module_sharing_a_stack_of_processes_is_never_cut() -> None:
    for folder in WHOLE_FOLDERS:
        shared = f"{folder}test_stack.py"
        times = [90.0, 70.0, 40.0]
        assert sum(times) > 2 * CHUNK_SECONDS
        tests = [item(f"t{k}", module=shared, shares=True) for k in range(len(times))]
        durations = {t.nodeid: s for t, s in zip(tests, times, strict=True)}

        order = schedule(tests, durations)

        assert order == [(0, shared), (1, shared), (2, shared)]  # one unit, in module order


def test_a_grouped_session_stacks_tests_go_out_in_chunks_across_modules() -> None:
    """Tests of a session-scoped stack that conftest.py groups run on a few workers (each
    chunk makes the stack once), not on every worker; a module-shared test keeps its module's."""
    times = {"a": 60.0, "b": 50.0, "c": 40.0, "d": 10.0}
    modules = {"a": "tests/r/test_one.py", "b": "tests/r/test_two.py"}
    tests = [
        Collected(f"{modules.get(n, 'tests/r/test_three.py')}::{n}", "m", False, True, "rl_env")
        for n in times
    ]
    tests.append(Collected("tests/r/test_own.py::e", "tests/r/test_own.py", True, True, "rl_env"))
    tests.append(Collected("tests/w/test_w.py::f", "tests/w/test_w.py", False, True))
    durations = {t.nodeid: times.get(t.nodeid[-1], 5.0) for t in tests}

    order = schedule(tests, durations)

    groups = dict(order)
    assert {groups[i] for i in range(4)} == {"stack:rl_env#1", "stack:rl_env#2"}  # 160 s: 2
    loads = sorted(
        sum(times[tests[i].nodeid[-1]] for i in range(4) if groups[i] == g)
        for g in ("stack:rl_env#1", "stack:rl_env#2")
    )
    assert loads == [70.0, 90.0]  # 60+10 and 50+40
    assert groups[4] == "tests/r/test_own.py"
    assert groups[5] is None


def test_plain_id_drops_the_xdist_group_suffix_but_not_an_at_inside_a_parameter() -> None:
    assert plain_id("tests/a.py::t@tests/a.py#2") == "tests/a.py::t"
    assert plain_id("tests/a.py::t[x@y]") == "tests/a.py::t[x@y]"
    assert plain_id("tests/a.py::t[x@y]@g") == "tests/a.py::t[x@y]"


def test_merged_durations_keep_what_the_run_did_not_measure_and_drop_the_quick(
    tmp_path: Path,
) -> None:
    old = {"a::kept": 3.0, "a::measured": 9.0, "a::now_quick": 2.0}
    measured = {"a::measured": 4.04, "a::now_quick": 0.1, "a::new": 0.7, "a::tiny": 0.2}

    merged = merge_durations(old, measured)

    assert merged == {"a::kept": 3.0, "a::measured": 4.0, "a::new": 0.7}
    path = tmp_path / "durations.json"
    assert load_durations(path) == {}
    path.write_text(json.dumps(merged))
    assert load_durations(path) == merged
