"""The BrowserPool resource: BitBrowser desktop browser profiles on tagged node workers.

The names here are the stored version's (`v1beta1`); `api.browserpool.v1alpha1`
is the version DESIGN.md writes, which applies converted
(`api.browserpool.conversion`). Manifests of both kinds load with
`api.loader.load_resources`.
"""

from __future__ import annotations

from devicepool.api.browserpool.v1beta1 import (
    BrowserConditionType,
    BrowserHealthSpec,
    BrowserPool,
    BrowserPoolSpec,
    BrowserPoolStatus,
)

__all__ = [
    "BrowserConditionType",
    "BrowserHealthSpec",
    "BrowserPool",
    "BrowserPoolSpec",
    "BrowserPoolStatus",
]
