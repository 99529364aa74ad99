"""Workflows schedule activities by their definitions; the worker registers the implementations."""

from __future__ import annotations

import inspect
import subprocess
import sys

from temporalio import activity

from devicepool.activities.definitions import (
    LEDGER_HOLD,
    DeviceActivityDefinitions,
    OrphanActivityDefinitions,
)
from devicepool.activities.devices import DeviceActivities
from devicepool.activities.ledger_calls import ledger_hold
from devicepool.activities.node_definitions import NodeRegistryActivityDefinitions


def _defined(cls: type) -> dict[str, activity._Definition]:
    found = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        definition = activity._Definition.from_callable(fn)
        if definition is not None:
            found[name] = definition
    return found


def test_every_definition_is_implemented_under_the_same_name_and_types() -> None:
    definitions = _defined(DeviceActivityDefinitions)
    assert len(definitions) == 14
    for implementation in (DeviceActivities,):
        implemented = _defined(implementation)
        for name, definition in definitions.items():
            assert name in implemented, f"{implementation.__name__} lacks {name}"
            assert implemented[name].name == definition.name
            ours = inspect.get_annotations(getattr(implementation, name))
            theirs = inspect.get_annotations(getattr(DeviceActivityDefinitions, name))
            assert ours == theirs, name
    assert not inspect.isabstract(DeviceActivities)


def test_the_orphan_sweep_definitions_are_implemented_by_the_device_activities() -> None:
    definitions = _defined(OrphanActivityDefinitions)
    assert set(definitions) == {"find_orphans", "terminate_orphans", "count_devices"}
    implemented = _defined(DeviceActivities)
    for name, definition in definitions.items():
        assert implemented[name].name == definition.name
        ours = inspect.get_annotations(getattr(DeviceActivities, name))
        assert ours == inspect.get_annotations(getattr(OrphanActivityDefinitions, name)), name


def test_the_worker_registers_implementations_not_definitions() -> None:
    activities = DeviceActivities(accounts={}, proxy_pools={})
    registered = (
        activities.pool_queue_activities()
        + activities.watch_queue_activities()
        + activities.account_queue_activities()
    )
    # ...and the ledger's local activity (a plain function: it needs nothing of theirs).
    assert {activity._Definition.must_from_callable(fn).name for fn in registered} == set(
        _defined(DeviceActivityDefinitions)
    ) | set(_defined(OrphanActivityDefinitions)) | set(
        _defined(NodeRegistryActivityDefinitions)
    ) | {LEDGER_HOLD}
    for fn in registered:
        assert fn is ledger_hold or type(fn.__self__) is DeviceActivities


def test_workflow_modules_import_without_httpx_or_prometheus() -> None:
    """What the sandbox passes through must not load an HTTP client or metrics at import."""
    script = (
        # The package loads its workflow modules on first use: ask for them.
        "import sys; from devicepool.workflows import WORKFLOWS; "
        "bad = [m for m in ('httpx', 'prometheus_client', 'yaml') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_long_watch_has_a_queue_of_its_own() -> None:
    """A watch holds its slot for up to an hour: never among the short activities."""
    activities = DeviceActivities(accounts={}, proxy_pools={})
    names = {
        queue: {activity._Definition.must_from_callable(fn).name for fn in fns}
        for queue, fns in (
            ("pool", activities.pool_queue_activities()),
            ("watch", activities.watch_queue_activities()),
        )
    }
    assert names["watch"] == {"watch_devices", "watch_health"}
    assert not {"watch_devices", "watch_health"} & names["pool"]
