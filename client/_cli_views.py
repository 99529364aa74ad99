"""The `-o table` views of `get`, `describe` and `devices` (`-o json|yaml`: `render.print_data`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import typer

from devicepool.api.kinds import DEVICE_POOL
from devicepool.client.render import age, print_fields, print_table
from devicepool.workflows.reconciler.lease_messages import LeasesView

# `get`'s table of DevicePools (`api.kinds`).
POOL_HEADERS = list(DEVICE_POOL.columns)
DEVICE_HEADERS = ["ID", "STATUS", "REGION", "AGE", "SESSION", "LAST ACTIVITY", "REASON"]


def pool_row(p: Any) -> list[Any]:
    """A `PoolSummary` as `get` shows it, in `POOL_HEADERS` order."""
    s, st = p.spec, p.status
    return [
        p.name,
        s.get("platform"),
        s.get("region"),
        st.get("desiredReplicas", s.get("replicas")),
        st.get("readyDevices"),
        st.get("leasedDevices"),  # None (a blank) from a worker before leases
        st.get("provisioningDevices"),
        st.get("pendingDevices"),
        st.get("offlineDevices"),
        _dollars(st.get("hourlyCost")),
        age(p.created),
        (st.get("phase") or "") + ("?" if p.stale else ""),
    ]


def _dollars(value: Any) -> str | None:
    """An hourly cost as `get` shows it (`1.20`); None (a blank) from a worker before it."""
    return f"{value:.2f}" if isinstance(value, int | float) else None


def print_description(data: dict[str, Any]) -> None:
    """`describe`: the fields, then conditions, devices and recent events."""
    print_fields(_fields(data))
    if data.get("note"):
        typer.echo(f"Note: {data['note']}")
    typer.echo("\nConditions:")
    print_table(
        ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
        [
            [
                c.get("type"),
                c.get("status"),
                c.get("reason"),
                age(c.get("lastTransitionTime")),
                c.get("message"),
            ]
            for c in data["status"].get("conditions") or []
        ],
    )
    typer.echo("\nDevices:")
    devices = data.get("devices")
    if devices is None:
        typer.echo("  (no worker answered)")
    else:
        print_devices(devices)
    print_leases(data.get("leases", {}))
    typer.echo("\nEvents:")
    events = data.get("events")
    if events is None:
        typer.echo("  (no worker answered)")
    elif not events:
        typer.echo("  <none>")
    else:
        print_table(
            ["TYPE", "REASON", "AGE", "MESSAGE"],
            [[e.get("type"), e.get("reason"), event_age(e), e.get("message")] for e in events],
        )


def event_age(event: dict[str, Any], now: datetime | None = None) -> str:
    """kubectl's event age: `3m`, or `3m (x4 over 10m)` for a repeated event."""
    last = age(event.get("time"), now)
    count = int(event.get("count") or 1)
    if count <= 1 or not event.get("firstTime"):
        return last
    return f"{last} (x{count} over {age(event['firstTime'], now)})"


def _fields(data: dict[str, Any]) -> list[tuple[str, Any]]:
    spec, status, wf = data["spec"], data["status"], data["workflow"]
    proxy, provider = spec.get("proxy") or {}, spec.get("provider") or {}
    health, scale_down = spec.get("health") or {}, spec.get("scaleDown") or {}
    default = "worker's setting"
    return [
        ("Name", data["metadata"]["name"]),
        ("Workflow", f"{wf['id']} (run {wf['runId']}, {wf['status']})"),
        ("Created", data["metadata"].get("creationTimestamp")),
        ("Provider", provider.get("name")),
        ("Platform", f"{spec.get('platform')} {spec.get('osVersion', '')}".strip()),
        ("Region", spec.get("region")),
        ("Account", provider.get("account")),
        (
            "Proxy",
            f"{proxy.get('poolRef')} (session {proxy.get('sessionTTL', '0s')})" if proxy else None,
        ),
        (
            "Health",
            f"maxUnhealthy {health.get('maxUnhealthy', '40%')}, "
            f"offlineAfter {health.get('offlineAfter', default)}, "
            f"startupTimeout {health.get('startupTimeout', default)}",
        ),
        ("Scale-down", f"idleGrace {scale_down.get('idleGrace', default)}"),
        ("Phase", status.get("phase")),
        (
            "Replicas",
            f"{status.get('desiredReplicas', spec.get('replicas'))} desired | "
            f"{status.get('readyDevices', 0)} ready | {status.get('busyDevices', 0)} busy | "
            f"{status.get('provisioningDevices', 0)} provisioning | "
            f"{status.get('pendingDevices', 0)} pending | "
            f"{status.get('offlineDevices', 0)} offline",
        ),
        ("Rollout", _rollout_line(spec, status)),
        ("Spend", _spend_line(spec, status)),
        ("Protected", ", ".join(status.get("protectedDevices") or []) or None),
        ("Leases", leases_line(status, data.get("leases"))),
        ("Generation", f"observed {status.get('observedGeneration', '-')}"),
        ("Last reconciled", status.get("lastReconciled")),
    ]


def _rollout_line(spec: dict[str, Any], status: dict[str, Any]) -> str | None:
    """`describe`'s rollout progress: devices of the current template, and the limits."""
    rollout = spec.get("rollout")
    if not rollout:
        return None
    replicas = status.get("desiredReplicas", spec.get("replicas"))
    return (
        f"{status.get('updatedDevices', 0)}/{replicas} updated "
        f"(maxSurge {rollout.get('maxSurge', 1)}, maxUnavailable {rollout.get('maxUnavailable', 0)})"
    )


def _spend_line(spec: dict[str, Any], status: dict[str, Any]) -> str:
    """`describe`'s spend: what the pool bills now and so far, and its cap."""
    line = f"${status.get('hourlyCost', 0):g}/h now, ${status.get('costToDate', 0):g} to date"
    cap = spec.get("spendCap") or {}
    limits = [f"{k} {cap[k]}" for k in ("maxDevices", "maxHourlyCost") if cap.get(k) is not None]
    return line + (f" (spendCap {', '.join(limits)})" if limits else "")


def leases_line(
    status: dict[str, Any], leases: dict[str, Any] | None, now: datetime | None = None
) -> str | None:
    """`describe`'s leases: `2 held | 1 waiting | oldest waits 45s` (and how many ended
    without their holder, if any); None from a worker before leases."""
    if "leasedDevices" not in status:
        return None
    line = f"{status.get('leasedDevices', 0)} held | {status.get('leasesQueued', 0)} waiting"
    now = now or datetime.now(UTC)
    made = [t.get("createdAt") for t in (leases or {}).get("tickets") or []]
    if made and made[0]:
        line += f" | oldest waits {age(made[0], now)}"  # the ticket's own time: live
    elif status.get("leasesQueued") and status.get("oldestQueuedSeconds") is not None:
        waited = timedelta(seconds=float(status["oldestQueuedSeconds"]))
        line += f" | oldest waited {age(now - waited, now)} at the last pass"
    if status.get("leasesExpired"):
        line += f" | {status['leasesExpired']} ended without their holder"
    return line


def print_leases(leases: dict[str, Any] | None) -> None:
    """`describe`'s leases and queue, as `devicepool leases POOL` prints them; nothing when
    none is held or waited for."""
    if leases is None:
        typer.echo("\nLeases:\n  (no worker answered)")
        return
    if not leases.get("leases") and not leases.get("tickets"):
        return
    # Here, not at the top: the lease commands' module imports the kinds' views (this one).
    from devicepool.client._cli_leases import (
        LEASE_COLUMNS,
        TICKET_COLUMNS,
        lease_row,
        ticket_row,
    )

    view = LeasesView.model_validate(leases)
    now = datetime.now(UTC)
    typer.echo("\nLeases:")
    print_table(LEASE_COLUMNS, [lease_row(x, now) for x in view.leases])
    if view.tickets:
        typer.echo("")
        print_table(TICKET_COLUMNS, [ticket_row(t, i + 1, now) for i, t in enumerate(view.tickets)])


def print_devices(items: list[dict[str, Any]]) -> None:
    """Devices as the `devices` query answers them (camelCase `DeviceInfo`)."""
    print_table(
        DEVICE_HEADERS,
        [
            [
                d.get("id"),
                d.get("status"),
                d.get("region"),
                age(d.get("createdAt")),
                d.get("sessionActive"),
                age(d.get("lastActivityAt")),
                d.get("reason"),
            ]
            for d in items
        ],
    )
