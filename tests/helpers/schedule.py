"""The order `make test` hands tests to its xdist workers, from their measured durations.

Under `--dist loadgroup --no-loadscope-reorder`, pytest-xdist hands out units
(one test, or every test of an xdist group) in collection order, the next to
whichever worker frees up first. Ordered slowest first, that is a
longest-processing-time-first packing: no long unit starts near the end.

A group is kept only where tests truly share something made for them: a module
whose tests use a module-scoped fixture (a dev server, a dev stack, a wheel)
runs in one worker, so that it is made once. A module measured longer than
`CHUNK_SECONDS` is cut into chunks of about that length, each its own group
(each makes the fixture once): one long module would otherwise be the run's
length. Not so in `WHOLE_FOLDERS`, whose modules share stacks of processes (a
`devicepool dev` stack, a cluster): made again for each chunk, such a stack costs
more CPU than the module's length costs the run. Session-scoped stacks (each
folder's conftest.py) are made once per worker that needs one: where all of a
stack's tests are short beside the run (`Collected.stack`, conftest.py's
`GROUPED_STACKS`), they go out in chunks of `CHUNK_SECONDS` too, so that a few
workers make that stack instead of each of them.

`make durations` runs the suite as `make test` does and writes each test's
measured time (setup, call and teardown) to tests/durations.json; tests under
`MIN_SECONDS` are left out (they are all alike). A test missing there counts as
`UNKNOWN_SERVER_SECONDS` if it starts a server or a process, else as
`UNKNOWN_SECONDS`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHUNK_SECONDS",
    "WHOLE_FOLDERS",
    "Collected",
    "load_durations",
    "merge_durations",
    "plain_id",
    "schedule",
]

# Each chunk makes its module's fixture again (a dev server: ~1.5 CPU-s) on a CPU-bound
# run; chunks of up to 90 s still pack into a 150-s run when they go out first.
CHUNK_SECONDS = 90.0
MIN_SECONDS = 0.5
UNKNOWN_SECONDS = 0.1
UNKNOWN_SERVER_SECONDS = 10.0
# Folders whose modules are never cut into chunks (see the module docstring).
WHOLE_FOLDERS = ("tests/e2e/", "tests/deploy/")


@dataclass(frozen=True)
class Collected:
    """What the schedule knows of one collected test."""

    nodeid: str  # without xdist's "@group" suffix
    module: str  # its module's path, as in the node id
    shares: bool  # uses a module-scoped fixture: runs with its module's other tests
    server: bool  # starts a server or a process (the devserver or e2e marker)
    # The session-scoped stack it uses whose tests are kept on few workers, if any.
    stack: str | None = None


def plain_id(nodeid: str) -> str:
    """A node id without the "@group" suffix pytest-xdist adds (as its scheduler splits it)."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[0]
    return nodeid


def schedule(
    tests: Sequence[Collected], durations: Mapping[str, float]
) -> list[tuple[int, str | None]]:
    """The order to hand `tests` out in (indices into it), with each one's xdist group.

    Units go slowest first; the tests of one unit stay in their collection order.
    """

    def seconds(test: Collected) -> float:
        default = UNKNOWN_SERVER_SECONDS if test.server else UNKNOWN_SECONDS
        return durations.get(test.nodeid, default)

    shared: dict[str, list[int]] = {}
    for index, test in enumerate(tests):
        if test.shares:
            shared.setdefault(test.module, []).append(index)
        elif test.stack:
            shared.setdefault(f"stack:{test.stack}", []).append(index)
    group: dict[int, str] = {}
    for module, indices in shared.items():
        times = [seconds(tests[i]) for i in indices]
        chunks = dict.fromkeys(indices) if module.startswith(WHOLE_FOLDERS) else None
        for index, chunk in (chunks or _chunks(indices, times)).items():
            group[index] = module if chunk is None else f"{module}#{chunk}"

    units: dict[str, list[int]] = {}
    for index, test in enumerate(tests):
        units.setdefault(group.get(index, test.nodeid), []).append(index)
    ordered = sorted(units.values(), key=lambda unit: -sum(seconds(tests[i]) for i in unit))
    return [(index, group.get(index)) for unit in ordered for index in unit]


def _chunks(indices: list[int], times: list[float]) -> dict[int, int | None]:
    """Each test's chunk of its module (None: the module is one chunk).

    Longest first onto the lightest chunk, so the chunks come out about even."""
    count = max(1, math.ceil(sum(times) / CHUNK_SECONDS))
    if count == 1 or len(indices) == 1:
        return dict.fromkeys(indices)
    count = min(count, len(indices))
    load = [0.0] * count
    chunk_of: dict[int, int | None] = {}
    for time, index in sorted(zip(times, indices, strict=True), key=lambda pair: -pair[0]):
        lightest = load.index(min(load))
        load[lightest] += time
        chunk_of[index] = lightest + 1
    return chunk_of


def load_durations(path: Path) -> dict[str, float]:
    """The measured durations (an empty map if the file is missing)."""
    if not path.is_file():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}


def merge_durations(old: Mapping[str, float], measured: Mapping[str, float]) -> dict[str, float]:
    """`old` updated with a run's `measured` times (only those of `MIN_SECONDS` or more kept).

    A test the run measured replaces its old figure, even when it went under the
    minimum; a test of a file that is gone is dropped by the caller."""
    merged = {k: v for k, v in old.items() if k not in measured}
    merged.update({k: round(v, 1) for k, v in measured.items() if v >= MIN_SECONDS})
    return dict(sorted(merged.items()))
