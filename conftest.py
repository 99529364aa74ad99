"""Test-run wiring for the whole suite (each layer's fixtures live in its own conftest).

Under pytest-xdist (`make test` runs `-n 3 --dist loadgroup`), the layers that
start servers keep all their tests in one worker, so each starts its Temporal
dev server once; the unit layers spread freely over the workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Billed vs requested device-hours for the e2e-like tests (tests/e2e and tests/deploy):
# the `device_hours` fixture and the terminal summary's worst ratio.
pytest_plugins = ["tests.e2e.device_hours"]

TESTS = Path(__file__).parent / "tests"
# Layers whose tests share a session-scoped stack (dev server, workers, ...) run
# in one worker each; the two that spawn whole process trees share one, so they
# never compete for the two cores at the same time.
GROUPS = {
    "workflows": "workflows",
    "ratelimit": "ratelimit",
    "observability": "observability",
    "e2e": "processes",
    "deploy": "processes",
}
# Modules that mostly sleep on purpose (a minute past a deadline) get a worker
# and a dev server of their own, so they wait beside the rest, not before it.
MODULE_GROUPS = {
    "test_pool_backlog.py": "workflows-backlog",
    # The health child's tests wait on its clocks: a dev server of their own.
    "test_pool_health.py": "workflows-health",
    "test_health_lifetime.py": "workflows-health",
    # The orphan sweep lists the whole account: no other test's pools beside it.
    "test_orphan_sweep.py": "workflows-orphans",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            layer = item.path.relative_to(TESTS).parts[0]
        except ValueError:
            continue
        group = MODULE_GROUPS.get(item.path.name) or GROUPS.get(layer)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
