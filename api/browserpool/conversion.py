"""BrowserPool's conversion rules (`api.converter` is the engine): `BROWSER_POOL.convert`, ...

There is no `wire_spec`: no build that knows BrowserPool predates v1beta1, so a client
always sends the stored version."""

from __future__ import annotations

from typing import Any

import pydantic

from devicepool.api.browserpool import v1alpha1, v1beta1
from devicepool.api.conversion import (
    proxy_alpha_as_it_goes,
    proxy_looks_v1alpha1,
    proxy_to_v1alpha1,
    proxy_to_v1beta1,
)
from devicepool.api.converter import Converter
from devicepool.api.names import KIND_BROWSER_POOL
from devicepool.api.validation_messages import format_errors

__all__ = ["BROWSER_POOL", "KEPT_FIELDS", "spec_to_v1alpha1", "spec_to_v1beta1"]

# The v1beta1 spec fields a v1alpha1 BrowserPool has no place for (each a mapping).
KEPT_FIELDS = frozenset({"health", "leases", "autoscale", "schedule"})


# --- specs --------------------------------------------------------------------------


def spec_to_v1beta1(
    spec: v1alpha1.BrowserPoolSpec, kept: dict[str, Any] | None = None
) -> v1beta1.BrowserPoolSpec:
    """`spec` in v1beta1; `kept`: v1beta1-only fields a conversion to v1alpha1 set aside."""
    kept = kept or {}
    return v1beta1.BrowserPoolSpec.model_validate(
        {
            "replicas": spec.replicas,
            "nodeSelector": spec.node_selector,
            "fingerprint": spec.fingerprint,
            "proxy": proxy_to_v1beta1(spec.proxy),
            "groupId": spec.group_id,
            "open": spec.open,
            "health": kept.get("health", {}),
            "leases": kept.get("leases"),
            "autoscale": kept.get("autoscale"),
            "schedule": kept.get("schedule"),
        }
    )


def spec_to_v1alpha1(
    spec: v1beta1.BrowserPoolSpec,
) -> tuple[v1alpha1.BrowserPoolSpec, dict[str, Any]]:
    """`spec` in v1alpha1, and the v1beta1 fields it cannot hold (empty if none)."""
    alpha = v1alpha1.BrowserPoolSpec(
        replicas=spec.replicas,
        node_selector=spec.node_selector,
        fingerprint=spec.fingerprint,
        proxy=proxy_to_v1alpha1(spec.proxy),
        group_id=spec.group_id,
        open=spec.open,
    )
    # Only what differs from the defaults: a pool that sets nothing keeps no annotation.
    health = spec.health.model_dump(mode="json", exclude_defaults=True)
    kept: dict[str, Any] = {"health": health} if health else {}
    if spec.leases is not None:  # present or not (an empty mapping is a choice too)
        kept["leases"] = spec.leases.to_json_dict()
    if spec.autoscale is not None:
        kept["autoscale"] = spec.autoscale.to_json_dict()
    if spec.schedule is not None:
        kept["schedule"] = [window.to_json_dict() for window in spec.schedule]
    return alpha, kept


def _annotation_problem(exc: pydantic.ValidationError) -> str:
    # The first problem, in the manifest's words (`health.failureStreakLimit: must be >= 1, ...`).
    [first, *_] = format_errors(exc.errors(), model=v1beta1.BrowserPoolSpec, prefix="", base=())
    return first


BROWSER_POOL: Converter[v1alpha1.BrowserPool, v1beta1.BrowserPool] = Converter(
    alpha=v1alpha1.BrowserPool,
    stored=v1beta1.BrowserPool,
    spec_to_stored=spec_to_v1beta1,
    spec_to_alpha=spec_to_v1alpha1,
    looks_alpha=proxy_looks_v1alpha1,
    kept_fields=KEPT_FIELDS,
    renames={("proxy", "stickyTTL"): ("proxy", "sessionTTL")},
    annotation_problem=_annotation_problem,
    alpha_as_it_goes=proxy_alpha_as_it_goes,
    named_in_errors=KIND_BROWSER_POOL,
)
