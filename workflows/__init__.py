"""Deterministic orchestration: the pool loop, its provisioning children, the pure planner.

The workflow classes load on first use (PEP 562 `__getattr__`), not with the
package: the worker's sandbox runs every workflow with a fresh copy of its own
module and of this package (`worker/build.py`, `workflow_runner`), and this
package importing all five workflow modules made each cached workflow carry a
copy of all five (~450 KiB apiece, 2,000 of them at 1,000 pools).
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

# Everything a `devicepool` worker registers (`WORKFLOWS`, in this order): the
# pool, its batches and health check, the per-account permit ledger (rate
# limits) and the per-account orphan sweep; each class and its module.
_MODULES = {
    "DevicePoolWorkflow": "pool.workflow",
    "ProvisionBatchWorkflow": "provision.workflow",
    "PoolHealthWorkflow": "health.workflow",
    "AccountLedgerWorkflow": "ledger.workflow",
    "OrphanSweepWorkflow": "orphans.workflow",
    # The node workers' registry (BrowserPool placement reads it through `live_nodes`).
    "NodeRegistryWorkflow": "nodes.workflow",
    # The second kind: BitBrowser profiles on the node workers it places them on.
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
