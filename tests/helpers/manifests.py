"""v1beta1 DevicePools for the workflow tests, and applying one to a running pool; a v1alpha1
DevicePool's manifest for the CLI tests.

`beta_pool(name, replicas, **spec)` is the parsed manifest of an android pool in
us-west on OS 14 with `spec`'s fields added or overriding those; `reapply` sends it
to the pool's `apply` update, as `devicepool apply` does to a running pool.
`alpha_yaml(name, **spec)` is the YAML of an android v1alpha1 pool, as a file holds it.
"""

from __future__ import annotations

from typing import Any

import yaml
from temporalio.client import WorkflowHandle

from devicepool.api import parse_pool
from devicepool.workflows.pool.messages import Accepted, ApplyRequest


def beta_pool(name: str, replicas: int, **spec: Any) -> Any:
    """A parsed v1beta1 DevicePool: android, us-west, OS 14, `replicas`, then `spec`."""
    return parse_pool(
        {
            "apiVersion": "mobile.example.com/v1beta1",
            "kind": "DevicePool",
            "metadata": {"name": name},
            "spec": {
                "platform": "android",
                "region": "us-west",
                "osVersion": "14",
                "replicas": replicas,
                **spec,
            },
        }
    )


def alpha_yaml(name: str, *, replicas: int = 2, region: str = "us-west", **spec: Any) -> str:
    """A v1alpha1 DevicePool manifest: android, `region`, `replicas`, then `spec`."""
    return yaml.safe_dump(
        {
            "apiVersion": "mobile.example.com/v1alpha1",
            "kind": "DevicePool",
            "metadata": {"name": name},
            "spec": {"platform": "android", "region": region, "replicas": replicas, **spec},
        },
        sort_keys=False,
    )


async def reapply(handle: WorkflowHandle[Any, Any], pool: Any) -> None:
    """Apply `pool` (from `beta_pool` or `parse_pool`) to its running workflow."""
    await handle.execute_update(
        "apply", ApplyRequest(metadata=pool.metadata, spec=pool.spec), result_type=Accepted
    )
