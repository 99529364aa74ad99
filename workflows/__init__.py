"""Deterministic orchestration: the pool loop, its provisioning children, the pure planner.

The workflow classes load on first use (PEP 562 `__getattr__`), not with the
package. Why: docs/scaling.md, "Memory".
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devicepool.workflows.browserpool.workflow import BrowserPoolWorkflow
    from devicepool.workflows.health.workflow import PoolHealthWorkflow
    from devicepool.workflows.ledger.workflow import AccountLedgerWorkflow
    from devicepool.workflows.nodes.workflow import NodeRegistryWorkflow
    from devicepool.workflows.orphans.workflow import OrphanSweepWorkflow
    from devicepool.workflows.pool.workflow import DevicePoolWorkflow
    from devicepool.workflows.provision.workflow import ProvisionBatchWorkflow

    WORKFLOWS: list[type]

# Every workflow a worker registers (`WORKFLOWS`, in this order), and its module.
_MODULES = {
    "DevicePoolWorkflow": "pool.workflow",
    "ProvisionBatchWorkflow": "provision.workflow",
    "PoolHealthWorkflow": "health.workflow",
    "AccountLedgerWorkflow": "ledger.workflow",
    "OrphanSweepWorkflow": "orphans.workflow",
    "NodeRegistryWorkflow": "nodes.workflow",
    "BrowserPoolWorkflow": "browserpool.workflow",
}
WORKFLOW_MODULES = frozenset(f"{__name__}.{module}" for module in _MODULES.values())


def __getattr__(name: str) -> Any:
    if name == "WORKFLOWS":
        value: Any = [__getattr__(cls) for cls in _MODULES]
    elif name in _MODULES:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "WORKFLOWS",
    "WORKFLOW_MODULES",
    "AccountLedgerWorkflow",
    "BrowserPoolWorkflow",
    "DevicePoolWorkflow",
    "NodeRegistryWorkflow",
    "OrphanSweepWorkflow",
    "PoolHealthWorkflow",
    "ProvisionBatchWorkflow",
]
