"""Deterministic orchestration: the pool loop, its provisioning children, the pure planner."""

from workflows.health import PoolHealthWorkflow
from workflows.ledger import AccountLedgerWorkflow
from workflows.pool import DevicePoolWorkflow
from workflows.provision import ProvisionBatchWorkflow

# Everything a `devicepool` worker registers.
WORKFLOWS = [DevicePoolWorkflow, ProvisionBatchWorkflow, PoolHealthWorkflow]
# The per-account permit ledger (rate limits).
WORKFLOWS.append(AccountLedgerWorkflow)

__all__ = [
    "WORKFLOWS",
    "AccountLedgerWorkflow",
    "DevicePoolWorkflow",
    "PoolHealthWorkflow",
    "ProvisionBatchWorkflow",
]
