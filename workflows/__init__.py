"""Deterministic orchestration: the pool loop, its provisioning children, the pure planner."""

from devicepool.workflows.health import PoolHealthWorkflow
from devicepool.workflows.ledger import AccountLedgerWorkflow
from devicepool.workflows.orphans import OrphanSweepWorkflow
from devicepool.workflows.pool import DevicePoolWorkflow
from devicepool.workflows.provision import ProvisionBatchWorkflow

# Everything a `devicepool` worker registers.
WORKFLOWS = [DevicePoolWorkflow, ProvisionBatchWorkflow, PoolHealthWorkflow]
# The per-account permit ledger (rate limits).
WORKFLOWS.append(AccountLedgerWorkflow)
# The per-account orphan sweep.
WORKFLOWS.append(OrphanSweepWorkflow)

__all__ = [
    "WORKFLOWS",
    "AccountLedgerWorkflow",
    "DevicePoolWorkflow",
    "OrphanSweepWorkflow",
    "PoolHealthWorkflow",
    "ProvisionBatchWorkflow",
]
