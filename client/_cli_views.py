"""The `-o table` views of `get`, `describe` and `devices` (`-o json|yaml`: `render.print_data`)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import typer

from devicepool.api.durations import format_duration
from devicepool.api.kinds import DEVICE_POOL
from devicepool.api.v1beta1 import DEFAULT_LEASES
from devicepool.client.render import age, cell, print_fields, print_table
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
        (st.get("phase") or "") + ("?" if p.stale else "") + _rollout_progress(st),
    ]


def _rollout_progress(status: dict[str, Any]) -> str:
    """` (rollout 2/4)` beside the phase while a rollout replaces devices (`get`, `get -w`)."""
    rolling = _condition(status, "RollingOut")
    if rolling is None or rolling.get("status") != "True":
        return ""
    desired = int(status.get("desiredReplicas") or 0)
    return f" (rollout {min(int(status.get('updatedDevices') or 0), desired)}/{desired})"


def _dollars(value: Any) -> str | None:
    """An hourly cost as `get` shows it (`1.20`); None (a blank) from a worker before it."""
    return f"{value:.2f}" if isinstance(value, int | float) else None


def print_description(data: dict[str, Any]) -> None:
    """`describe`: the fields, then conditions, devices and recent events."""
    print_fields(_fields(data))
    if data.get("note"):
        typer.echo(f"Note: {data['note']}")
    print_conditions(data["status"].get("conditions") or [])
    typer.echo("\nDevices:")
    devices = data.get("devices")
    if devices is None:
        typer.echo("  (no worker answered)")
    else:
        print_devices(devices)
    print_leases(data.get("leases", {}))
    print_events(data.get("events"))


def print_conditions(conditions: list[dict[str, Any]]) -> None:
    """`describe`'s conditions, for every kind: TYPE STATUS REASON AGE MESSAGE."""
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
            for c in conditions
        ],
    )


def print_events(events: list[dict[str, Any]] | None) -> None:
    """`describe`'s events, for every kind: a series said more than once on one row."""
    typer.echo("\nEvents:")
    if events is None:
        typer.echo("  (no worker answered)")
    elif not events:
        typer.echo("  <none>")
    else:
        print_table(
            ["TYPE", "REASON", "AGE", "MESSAGE"],
            [
                [e.get("type"), e.get("reason"), event_age(e), e.get("message")]
                for e in series(events)
            ],
        )


def series(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as kubectl shows them: one row per type, reason and message, counted and
    dated from its first to its last, in the order of their last time. The pool counts only
    a repeat back to back (`record`); one said again after others (`protect` twice with a
    `pause` between) is otherwise shown twice, as if it were news twice."""
    rows: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for e in events:
        key = (e.get("type"), e.get("reason"), e.get("message"))
        seen = rows.pop(key, None)
        if seen is not None:
            e = e | {
                "count": int(seen.get("count") or 1) + int(e.get("count") or 1),
                "firstTime": seen.get("firstTime") or seen.get("time"),
            }
        rows[key] = e  # popped and put back: it moves to its last time
    return list(rows.values())


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
    health = spec.get("health") or {}
    shown = {
        "provider",
        "platform",
        "osVersion",
        "region",
        "replicas",
        "proxy",
        "health",
        "scaleDown",
        "spendCap",
        "lifetime",
        "rollout",
        "disruption",
        "reserve",
        "leases",
    }
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
            + in_force(spec, status, "health", "offlineAfter", "offlineAfterSeconds")
            + ", "
            + in_force(spec, status, "health", "startupTimeout", "startupTimeoutSeconds"),
        ),
        ("Scale-down", in_force(spec, status, "scaleDown", "idleGrace", "idleGraceSeconds")),
        ("Lifetime", compact(spec.get("lifetime"))),
        ("Disruption", _disruption_line(spec.get("disruption"))),
        ("Reserve", compact(spec.get("reserve"))),
        ("Lease rules", lease_rules(spec)),
        *unknown_sections(spec, shown),
        ("Phase", status.get("phase")),
        (
            "Replicas",
            f"{status.get('desiredReplicas', spec.get('replicas'))} desired | "
            f"{status.get('readyDevices', 0)} ready | {status.get('busyDevices', 0)} busy | "
            f"{status.get('provisioningDevices', 0)} provisioning | "
            f"{status.get('pendingDevices', 0)} pending | "
            f"{status.get('offlineDevices', 0)} offline",
        ),
        ("Sized by", autoscale_line(status)),
        ("Rollout", _rollout_line(spec, status)),
        ("Spend", _spend_line(spec, status)),
        ("Protected", ", ".join(status.get("protectedDevices") or []) or None),
        ("Leases", leases_line(status, data.get("leases"))),
        ("Generation", f"observed {status.get('observedGeneration', '-')}"),
        ("Last reconciled", status.get("lastReconciled")),
    ]


def in_force(
    spec: dict[str, Any], status: dict[str, Any], section: str, key: str, worker_key: str
) -> str:
    """`offlineAfter 2m` as the spec sets it, else the worker's setting the pool goes by
    (`status.offlineAfterSeconds`): `offlineAfter 3m (the worker's)`. A worker from before
    it does not say."""
    said = (spec.get(section) or {}).get(key)
    if said is not None:
        return f"{key} {said}"
    seconds = status.get(worker_key)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"{key}: the worker's (not reported)"
    if not math.isfinite(seconds) or seconds < 0:
        return f"{key}: the worker's ({seconds!r}?)"
    return f"{key} {format_duration(seconds)} (the worker's)"


def lease_rules(spec: dict[str, Any]) -> str:
    """The spec's `leases` (unset: the rules every pool has, `DEFAULT_LEASES`)."""
    return compact(spec.get("leases") or DEFAULT_LEASES.to_json_dict()) or "-"


def _disruption_line(disruption: Any) -> str | None:
    """`10% for Drifted, Expired when 0 9 * * mon-fri for 8h; 0 for every reason`."""
    if not isinstance(disruption, dict):
        return compact(disruption)
    said = []
    for budget in disruption.get("budgets") or []:
        if not isinstance(budget, dict):
            said.append(compact(budget) or "-")
            continue
        reasons = budget.get("reasons")
        line = f"{budget.get('devices')} for " + (
            ", ".join(map(str, reasons)) if reasons else "every reason"
        )
        if budget.get("schedule"):
            line += f" when {budget['schedule']}"
            if budget.get("duration"):
                line += f" for {budget['duration']}"
        said.append(line)
    return "; ".join(said) or None


def compact(value: Any) -> str | None:
    """A spec section on one line: `maxAge 24h, gracePeriod 2h` (a nested section inline,
    `queue max 50, maxWait 5m`; a list bracketed); None for an unset one."""
    if value is None or value == {}:
        return None
    if isinstance(value, dict):
        return ", ".join(f"{k} {compact(v) or '-'}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(compact(v) or "-" for v in value) + "]"
    return cell(value)


def autoscale_line(status: dict[str, Any]) -> str | None:
    """Why an autoscaled pool's size is what it is (its `Autoscaling` condition's message:
    `3 leased + 2 queued + buffer 2 = 7`), and the schedule window in force; None for a pool
    without `autoscale`."""
    condition = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Autoscaling"), None
    )
    if condition is None:
        return None
    line = str(condition.get("message") or condition.get("reason") or "")
    window = status.get("activeSchedule")
    return f"{line}; {window}" if window else line


def unknown_sections(spec: dict[str, Any], shown: set[str]) -> list[tuple[str, Any]]:
    """Sections of the spec `describe` has no line of its own for (a newer worker's), as
    written: nothing the spec says is left out."""
    return [
        (key[:1].upper() + re.sub(r"(?<!^)(?=[A-Z])", " ", key[1:]).lower(), compact(value))
        for key, value in spec.items()
        if key not in shown
    ]


def _rollout_line(spec: dict[str, Any], status: dict[str, Any]) -> str | None:
    """`describe`'s rollout: how far it is (never more updated than desired, as after a
    scale-down), and its limits."""
    rollout = spec.get("rollout")
    if not rollout:
        return None
    limits = f"(maxSurge {rollout.get('maxSurge', 1)}, maxUnavailable {rollout.get('maxUnavailable', 0)})"
    updated = int(status.get("updatedDevices") or 0)
    rolling = _condition(status, "RollingOut")
    if rolling is not None and rolling.get("status") == "False":
        return f"complete: {updated} device(s) on the current template {limits}"
    desired = int(status.get("desiredReplicas", spec.get("replicas")) or 0)
    return f"{min(updated, desired)}/{desired} updated {limits}"


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


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
