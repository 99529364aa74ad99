"""DevicePool manifests for tests and benches, as dicts or as YAML text, with keyword overrides.

The base is the pool most tests run: Android 14 in us-west, 0 replicas, the
`proxyseller-us` proxy pool. Every keyword is a spec field, spelled as in a
manifest (`osVersion=`, `providerCredentialRef=`), and replaces the base's; a
field given as None is left out (`proxy=None`: a pool with no proxy).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

API_VERSION = "mobile.example.com/v1alpha1"
PROXY = {"poolRef": "proxyseller-us", "stickyTTL": 900}
BASE_SPEC: dict[str, Any] = {
    "platform": "android",
    "region": "us-west",
    "osVersion": "14",
    "replicas": 0,
    "proxy": PROXY,
}


def pool_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """One DevicePool manifest (apiVersion, kind, metadata.name, spec) as a dict."""
    fields = copy.deepcopy({**BASE_SPEC, **spec})
    return {
        "apiVersion": API_VERSION,
        "kind": "DevicePool",
        "metadata": {"name": name},
        "spec": {key: value for key, value in fields.items() if value is not None},
    }


def pool_yaml(name: str, **spec: Any) -> str:
    """`pool_manifest` as YAML text, what `devicepool apply -f` reads."""
    return yaml.safe_dump(pool_manifest(name, **spec), sort_keys=False)


def write_pool(path: Path, name: str, **spec: Any) -> Path:
    """Write `pool_yaml` to `path` (a file name) and return it."""
    path.write_text(pool_yaml(name, **spec))
    return path
