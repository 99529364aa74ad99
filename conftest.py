"""Test-run wiring for the whole suite (each layer's fixtures live in its own conftest).

Under pytest-xdist (`make test` runs `-n 6 --dist loadgroup --no-loadscope-reorder`),
tests go out slowest first by their measured durations (tests/durations.json,
written by `make durations`); the tests of a module with a module-scoped
fixture (a dev server, a dev stack) stay together in groups, so that it is made
once (tests/helpers/schedule.py).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.schedule import (
    Collected,
    load_durations,
    merge_durations,
    plain_id,
    schedule,
)

# Billed vs requested device-hours for the e2e-like tests (tests/e2e and tests/deploy):
# the `device_hours` fixture and the terminal summary's worst ratio.
pytest_plugins = ["tests.helpers.device_hours"]

ROOT = Path(__file__).parent
DURATIONS = ROOT / "tests" / "durations.json"
# Fixture scopes whose tests must run in one worker for the fixture to be made once.
SHARED_SCOPES = ("module", "package", "class")
SERVER_MARKERS = ("devserver", "e2e")
# The Go runtime of the Temporal dev servers (and Prometheus) the tests start: `make test`
# runs ~30 of them on two cores beside ten xdist workers. One P each, so no idle thread spins
# looking for work, and half as many garbage collections: test_pool_workflow.py with
# test_pool_health.py, 24.8 -> 22.9 CPU-s (runs side by side); a server's peak memory
# ~260 -> ~340 MB.
GO_RUNTIME = {"GOMAXPROCS": "1", "GOGC": "200"}
# Session-scoped stacks whose tests go out in few chunks (tests/helpers/schedule.py), so
# that two or so workers make the stack, not every worker one of its tests lands on. The
# rate tests' stack (a dev server, two sets of workers over six accounts' ledgers: ~2 CPU-s
# to start and keep a minute) serves ~100 s of tests; spread over ten workers it was
# made eight times. (Not the workflow tests' stack: its ~1,200 s of tests need most workers.)
GROUPED_STACKS = ("rl_env",)
# BitBrowser emulator processes of one account share it through a directory of the
# user's (docs/bitbrowser-emulator.md): each test process (xdist worker) gets its own,
# so tests started side by side, or a developer's own emulator, never share an account.
BITBROWSER_ACCOUNTS_DIR = "DEVICEPOOL_BITBROWSER_ACCOUNTS_DIR"


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationsRecorder(), "devicepool-durations")
    for name, value in GO_RUNTIME.items():
        os.environ.setdefault(name, value)  # (a developer's own value stays)
    # (An xdist worker inherits the controller's directory: it makes its own too.)
    if BITBROWSER_ACCOUNTS_DIR in os.environ and not os.environ.get(_MADE_FOR_TESTS):
        return  # the user's own choice
    made = tempfile.mkdtemp(prefix="devicepool-bitbrowser-")
    os.environ[BITBROWSER_ACCOUNTS_DIR] = os.environ[_MADE_FOR_TESTS] = made
    config.stash[_ACCOUNTS_DIR_KEY] = made


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_ACCOUNTS_DIR_KEY, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(BITBROWSER_ACCOUNTS_DIR, None)
        os.environ.pop(_MADE_FOR_TESTS, None)


_MADE_FOR_TESTS = "DEVICEPOOL_TEST_BITBROWSER_ACCOUNTS_DIR"
_ACCOUNTS_DIR_KEY = pytest.StashKey[str]()


# A test coroutine still running this long before its pytest-timeout (the ini's `timeout`, or
# its own mark) is cancelled where it waits: it fails with its own traceback and the xdist
# worker carries on. pytest-timeout stays the backstop for a hang outside the event loop,
# which it can only end by ending the worker ("node down"), and with it the run
# (`--max-worker-restart=0`), naming no line. The margin is left for the fixtures' teardown.
TEARDOWN_MARGIN = 20.0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    test = getattr(item, "obj", None)
    limit = _timeout_of(item) - TEARDOWN_MARGIN
    bounded = (
        inspect.iscoroutinefunction(test)
        and not hasattr(test, "hypothesis")  # (pytest-asyncio runs its inner test)
        and limit > 0
    )
    if bounded:
        item.obj = _within(test, limit)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if bounded:
            item.obj = test  # type: ignore[attr-defined]


def _timeout_of(item: pytest.Item) -> float:
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    return float(item.config.getini("timeout") or 0)


def _within(test: Callable[..., Any], limit: float) -> Callable[..., Any]:
    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(limit):
                return await test(*args, **kwargs)
        except TimeoutError as error:
            raise TimeoutError(
                f"the test ran past {limit:.0f} s (its timeout less {TEARDOWN_MARGIN:.0f} s "
                "for teardown): cancelled where it waited, the traceback above"
            ) from error

    return run


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each test's measured time to {DURATIONS.relative_to(ROOT)} "
        "(make durations); a failed test keeps its old figure",
    )


def collected(item: pytest.Item) -> Collected:
    fixtures = item._fixtureinfo.name2fixturedefs.values()
    return Collected(
        nodeid=plain_id(item.nodeid),
        module=item.nodeid.split("::", 1)[0],
        shares=any(defs and defs[-1].scope in SHARED_SCOPES for defs in fixtures),
        server=any(item.get_closest_marker(name) for name in SERVER_MARKERS),
        stack=next((name for name in GROUPED_STACKS if name in item.fixturenames), None),
    )


# First: xdist's own hook turns the `xdist_group` marks into the "@group" node id
# suffix its scheduler groups by, so they must be on the items before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # not under xdist: each module's tests in their order
    order = schedule([collected(item) for item in items], load_durations(DURATIONS))
    for index, group in order:
        if group:
            items[index].add_marker(pytest.mark.xdist_group(group))
    items[:] = [items[index] for index, _ in order]


class DurationsRecorder:
    """`--store-durations`: each test's setup, call and teardown added up, written at the end.

    Registered on the controller only: under xdist it gets every worker's reports. A
    test that failed keeps its old figure (a timeout is no measure of it); a run
    that did not finish writes nothing."""

    def __init__(self) -> None:
        self.measured: Counter[str] = Counter()
        self.failed: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.measured[plain_id(report.nodeid)] += report.duration
        if report.failed:
            self.failed.add(plain_id(report.nodeid))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return
        kept = {
            nodeid: seconds
            for nodeid, seconds in load_durations(DURATIONS).items()
            if (ROOT / nodeid.split("::", 1)[0]).is_file()
        }
        passed = {k: v for k, v in self.measured.items() if k not in self.failed}
        merged = merge_durations(kept, passed)
        DURATIONS.write_text(json.dumps(merged, indent=1) + "\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under `--dist loadgroup`: refuse to run if the groups did not take.

    pytest-xdist groups by an "@group" suffix it writes onto each marked item's
    node id; a pytest it does not know how to write that for (see the pin in
    pyproject.toml) runs every test anyway, spread over the workers: a module's
    dev server or dev stack made again for each of its tests.
    """
    if not hasattr(session.config, "workerinput") or not session.config.getvalue("loadgroup"):
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (first: {lost[0]}): "
            f"pytest {pytest.__version__} is outside what pyproject.toml pins"
        )
