"""Deterministic orchestration: the pool loop, its provisioning children, the pure planner."""

from workflows.pool import DevicePoolWorkflow
from workflows.provision import ProvisionBatchWorkflow

# Everything a `devicepool` worker registers.
WORKFLOWS = [DevicePoolWorkflow, ProvisionBatchWorkflow]

__all__ = ["WORKFLOWS", "DevicePoolWorkflow", "ProvisionBatchWorkflow"]
