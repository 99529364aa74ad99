"""Test-run wiring for the whole suite (each layer's fixtures live in its own conftest).

Under pytest-xdist (`make test` runs `-n 6 --dist loadgroup --no-loadscope-reorder`),
the tests that start servers or processes run in groups: a group stays in one
worker, so it starts its Temporal dev server (or its process tree) once. Tests
that start nothing spread freely over the workers. The groups go out longest
first (`GROUP_ORDER`), so no long group starts at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Billed vs requested device-hours for the e2e-like tests (tests/e2e and tests/deploy):
# the `device_hours` fixture and the terminal summary's worst ratio.
pytest_plugins = ["tests.helpers.device_hours"]

TESTS = Path(__file__).parent / "tests"
# Layers whose server-backed tests share a session-scoped stack (dev server,
# emulator, workers) run in one worker each.
GROUPS = {
    "workflows": "workflows",
    "ratelimit": "ratelimit",
    "observability": "observability",
    "e2e": "e2e",
    "deploy": "deploy",
    # devicepool dev --encrypt and the Web UI through the codec server; the codec-server process.
    "encryption": "encryption",
    # A dev server, a pool worker and two node workers in process (~35 s).
    "browserpool": "browserpool",
}
# Modules with a worker and a dev server of their own, so that they wait beside
# the rest, not before or after it.
MODULE_GROUPS = {
    # Sleeps a minute past an old deadline on purpose.
    "test_pool_backlog.py": "workflows-backlog",
    # The health child's tests wait on its clocks: replacements, and outages apart.
    "test_pool_health.py": "workflows-health",
    "test_pool_outage.py": "workflows-outage",
    "test_health_lifetime.py": "workflows-lifetime",
    # A Prometheus process of its own scraping a stack of its own (~50 s).
    "test_obs_alerts_prometheus.py": "observability-alerts",
    # Thirty pools applied at once, twice (~25 s): beside the shortest group.
    "test_pool_apply_many.py": "workflows-lifetime",
    # Per-device control, lifetime, drift, budgets and spend wait on devices' clocks
    # and sessions (~80 s): beside the pool's own tests, not after them.
    "test_pool_device_control.py": "workflows-control",
    "test_pool_spend.py": "workflows-control",
    # The orphan sweep lists the whole account: no other test's pools beside it.
    "test_orphan_sweep.py": "workflows-orphans",
    # A dev server and worker of its own on a BitBrowser cloud-phone account (~25 s).
    "test_pool_cloud_phones.py": "workflows-phones",
    # Two node workers and the node registry on a dev server of their own (~6 s).
    "test_node_workers.py": "workflows-nodes",
    # The rest of the pool's workflow tests, in three parts of 60-80 s each
    # (the pool workflow's own tests, test_pool_workflow.py and the modules not
    # named here, are the "workflows" group).
    "test_readme_promises.py": "workflows-3",
    "test_pool_status_truth.py": "workflows-3",
    "test_pool_continue_as_new.py": "workflows-3",
    "test_pool_observations.py": "workflows-3",
    "test_pool_worker_shutdown.py": "workflows-3",
    "test_pool_client.py": "workflows-2",
    "test_pool_teardown.py": "workflows-2",
    "test_health_idle_cost.py": "workflows-2",
    "test_pool_withdraw.py": "workflows-2",
    "test_pool_scale_down.py": "workflows-2",
    "test_provision_batch.py": "workflows-2",
    # A dev stack of its own, started three times on one data dir.
    "test_e2e_restart.py": "e2e-restart",
    # Dev stacks of their own with two BitBrowser nodes and node workers (~150 s).
    "test_e2e_dev_browser_nodes.py": "e2e-browser-nodes",
    # A dev stack of its own with one node: the cloud-phone example, made and deleted.
    "test_e2e_dev_cloud_phones.py": "e2e-phones",
    # A module-scoped dev server (setup) and wheel build (packaging), made once.
    "test_client_setup.py": "client-setup",
    "test_packaging.py": "packaging",
    # v0.1.0's worker from `git archive`, then this build's, twice (two clusters).
    "test_deploy_upgrade_from_v010.py": "deploy-upgrade",
}
# The order the groups are handed out in, with about how long each took in a
# full `make test` (seconds, its workers side by side on 2 cores; a group alone
# runs up to twice as fast): the longest first, so none starts at the end of
# the run; a group missing here goes out after these, before the tests that
# start nothing. One exception: pytest-xdist gives a worker a second unit at
# once when its first has at most two tests pending, so the backlog group (one
# test, mostly asleep) goes out first and the short deploy group right after
# the first `-n` (6, see the Makefile) units, onto its worker. Per-worker
# timelines at -n 6: with the outage group there instead (the order before
# this one) the backlog worker ended at 156 s (83 + 73), the others at
# 139-148 s; with this order every worker ended at 131-145 s.
GROUP_ORDER = {
    "workflows-backlog": 83,
    # Three dev stacks with BitBrowser nodes, one losing a node and getting it back.
    "e2e-browser-nodes": 150,
    "deploy-upgrade": 80,
    "ratelimit": 72,
    "workflows-health": 72,
    "observability": 56,
    "workflows-2": 73,
    "workflows-outage": 73,
    "deploy": 31,
    "workflows": 74,
    "workflows-3": 71,
    "workflows-control": 70,
    "e2e": 61,
    "workflows-lifetime": 60,
    "observability-alerts": 50,
    "e2e-restart": 38,
    "workflows-orphans": 38,
    "workflows-phones": 25,
    "browserpool": 35,
    "e2e-phones": 30,
    "workflows-nodes": 6,
}
SERVER_MARKERS = ("devserver", "e2e")
# BitBrowser emulator processes of one account share it through a directory of the
# user's (docs/bitbrowser-emulator.md): each test process (xdist worker) gets its own,
# so tests started side by side, or a developer's own emulator, never share an account.
BITBROWSER_ACCOUNTS_DIR = "DEVICEPOOL_BITBROWSER_ACCOUNTS_DIR"


def pytest_configure(config: pytest.Config) -> None:
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


def group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test that starts a server or a process; None for the rest."""
    try:
        layer = item.path.relative_to(TESTS).parts[0]
    except ValueError:
        return None
    if not any(item.get_closest_marker(name) for name in SERVER_MARKERS):
        return None
    return MODULE_GROUPS.get(item.path.name) or GROUPS.get(layer)


# First: xdist's own hook turns the `xdist_group` marks into the "@group" node id
# suffix its scheduler groups by, so they must be on the items before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {id(item): group_of(item) for item in items}
    for item in items:
        if group := groups[id(item)]:
            item.add_marker(pytest.mark.xdist_group(group))

    def rank(item: pytest.Item) -> float:
        group = groups[id(item)]
        if not group:
            return len(GROUP_ORDER) + 1
        return list(GROUP_ORDER).index(group) if group in GROUP_ORDER else len(GROUP_ORDER)

    # A stable sort: each module's tests keep their order (and stay together).
    items.sort(key=rank)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under `--dist loadgroup`: refuse to run if the groups did not take.

    pytest-xdist groups by an "@group" suffix it writes onto each marked item's
    node id; a pytest it does not know how to write that for (see the pin in
    pyproject.toml) runs every test anyway, spread over the workers, each
    starting its own servers beside the others: slower, and no longer alone
    where a test needs to be (test_orphan_sweep.py).
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
