"""What the CLI prints of a BrowserPool: its `get` rows, its profiles, its description
(reached through `_cli_kinds.VIEWS`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from devicepool.client._cli_views import (
    autoscale_line,
    compact,
    in_force,
    lease_rules,
    leases_line,
    print_conditions,
    print_events,
    print_leases,
    unknown_sections,
)
from devicepool.client.render import age, print_fields, print_table

PROFILE_HEADERS = ["ID", "SLOT", "NODE", "OPEN", "STATE"]


def browser_rows(pools: Sequence[Any]) -> list[list[Any]]:
    """`get`'s rows of BrowserPools, in `BROWSER_POOL.columns` order: NAME bare, as kubectl
    names a pod in `get pods` (`_cli_kinds.print_pools` says the kind where it must)."""
    return [
        [
            p.name,
            p.status.get("desiredReplicas", p.spec.get("replicas")),
            p.status.get("readyProfiles", 0),
            p.status.get("leasedDevices"),  # None (a blank) from a worker before leases
            p.status.get("openProfiles", 0),
            p.status.get("lostProfiles", 0),
            ", ".join(f"{n}={c}" for n, c in (p.status.get("byNode") or {}).items()) or "-",
            age(p.created),
            # A phase read from search attributes (no worker answered) is marked `?`.
            p.status.get("phase", "Pending") + ("?" if p.stale else ""),
        ]
        for p in pools
    ]


def print_profiles(profiles: list[dict[str, Any]]) -> None:
    print_table(
        PROFILE_HEADERS,
        [
            [p.get("id"), p.get("slot"), p.get("node"), p.get("open"), p.get("state")]
            for p in profiles
        ],
    )


def health_line(spec: dict[str, Any], status: dict[str, Any]) -> str:
    """`maxUnhealthy 40%, failureStreakLimit 3 (the worker's), nodeLostAfter 2m (the
    worker's)`: a limit the spec leaves unset as the worker's value the pool runs by (its
    status says it); a worker from before does not say."""
    health = spec.get("health") or {}
    return (
        f"maxUnhealthy {health.get('maxUnhealthy', '40%')}, "
        + _streak_limit(health, status)
        + ", "
        + in_force(spec, status, "health", "nodeLostAfter", "nodeLostAfterSeconds")
    )


def _streak_limit(health: dict[str, Any], status: dict[str, Any]) -> str:
    said = health.get("failureStreakLimit")
    if said:
        return f"failureStreakLimit {said}"
    limit = status.get("failureStreakLimit")
    if isinstance(limit, bool) or not isinstance(limit, int):
        return "failureStreakLimit: the worker's (not reported)"
    return f"failureStreakLimit {limit} (the worker's)"


def print_browser_description(data: dict[str, Any]) -> None:
    """`describe browserpool/NAME`: the fields, then conditions, profiles, leases and
    events, as a DevicePool's."""
    spec, status = data["spec"], data["status"]
    selector = ", ".join(f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items()) or "any"
    proxy = spec.get("proxy") or {}
    shown = {"replicas", "nodeSelector", "fingerprint", "proxy", "groupId", "open", "health"}
    print_fields(
        [
            ("Name", f"browserpool/{data['metadata']['name']}"),
            ("Created", data["metadata"].get("creationTimestamp")),
            ("Node selector", selector),
            ("Fingerprint", compact(spec.get("fingerprint")) or "a random one per profile"),
            (
                "Proxy",
                f"{proxy.get('poolRef')} (session {proxy.get('sessionTTL', '0s')})"
                if proxy
                else None,
            ),
            ("Group", spec.get("groupId")),
            ("Open", spec.get("open", True)),
            ("Health", health_line(spec, status)),
            ("Lease rules", lease_rules(spec)),
            *unknown_sections(spec, shown | {"leases"}),
            ("Phase", status.get("phase")),
            (
                "Profiles",
                f"{status.get('desiredReplicas', spec.get('replicas'))} desired | "
                f"{status.get('readyProfiles', 0)} ready | {status.get('openProfiles', 0)} open | "
                f"{status.get('lostProfiles', 0)} lost",
            ),
            ("Sized by", autoscale_line(status)),
            ("By node", ", ".join(f"{n}={c}" for n, c in (status.get("byNode") or {}).items())),
            ("Leases", leases_line(status, data.get("leases"))),
            ("Generation", f"observed {status.get('observedGeneration', '-')}"),
            ("Last reconciled", status.get("lastReconciled")),
        ]
    )
    print_conditions(status.get("conditions") or [])
    typer.echo("\nProfiles:")
    print_profiles(data.get("profiles") or [])
    print_leases(data.get("leases", {}))
    print_events(data.get("events"))
