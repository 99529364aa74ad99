"""What `describe` and `get` say of a pool, as a person reads them (issue 43: items 5, 9, 10,
11): each event once, rollout figures that add up, every spec section with the values in
force, the name beside a KIND column. Pure: fixed descriptions, no stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL
from devicepool.client._cli_browser import print_browser_description
from devicepool.client._cli_kinds import print_pools
from devicepool.client._cli_views import pool_row, print_description
from devicepool.client._results import PoolSummary


def iso(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat()


def event(reason: str, message: str, seconds_ago: float, **more: Any) -> dict[str, Any]:
    return {"time": iso(seconds_ago), "type": "Normal", "reason": reason, "message": message} | more


def device_pool(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p1", "creationTimestamp": iso(3600)},
        "spec": {
            "provider": {"name": "bitcloudphone", "account": "default"},
            "platform": "android",
            "region": "us-west",
            "replicas": 4,
            "health": {"maxUnhealthy": "40%"},
            "scaleDown": {},
        },
        "status": {"phase": "Ready", "desiredReplicas": 4, "conditions": []} | status,
        "workflow": {"id": "devicepool/p1", "runId": "r", "status": "RUNNING"},
        "devices": [],
        "events": [],
        "leases": {"leases": [], "tickets": []},
    }


def browser_pool(**status: Any) -> dict[str, Any]:
    return {
        "kind": "BrowserPool",
        "metadata": {"name": "b1", "creationTimestamp": iso(7200)},
        "spec": {"replicas": 2, "nodeSelector": {}, "fingerprint": {}, "open": True},
        "status": {"phase": "Ready", "desiredReplicas": 2, "conditions": []} | status,
        "profiles": [],
        "events": [],
        "leases": {"leases": [], "tickets": []},
    }


def section(out: str, title: str) -> list[str]:
    """The lines of `describe`'s section `title` (up to the next blank line)."""
    lines = out[out.index(f"\n{title}:\n") + len(title) + 3 :].split("\n\n")[0].splitlines()
    return lines


def field(out: str, label: str) -> str:
    """The value of `describe`'s `label:` line."""
    for line in out.splitlines():
        if line.startswith(f"{label}:"):
            return line[len(label) + 1 :].strip()
    raise AssertionError(f"no {label}: line in\n{out}")


# ---------------------------------------------------------------- item 9: once each


@pytest.mark.parametrize("kind", ["DevicePool", "BrowserPool"])
def test_describe_shows_an_event_said_again_once_with_its_count(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `protect` twice with a `pause` between: the pool's ring holds both (only a repeat
    # back to back is counted on the last one), and kubectl shows such a series once.
    data = device_pool() if kind == "DevicePool" else browser_pool()
    data["events"] = [
        event("Protected", "dev-1 is protected until unprotected", 300),
        event("RemediationPausedByUser", "remediation paused", 240, type="Warning"),
        event("Protected", "dev-1 is protected until unprotected", 120),
        event("Scaled", "replicas 4 -> 5 (generation 2)", 60, count=2, firstTime=iso(90)),
    ]
    show = print_description if kind == "DevicePool" else print_browser_description
    show(data)
    rows = section(capsys.readouterr().out, "Events")
    assert rows[0].split() == ["TYPE", "REASON", "AGE", "MESSAGE"]
    protected = [r for r in rows if "Protected" in r.split()]
    assert len(protected) == 1, rows
    assert "2m (x2 over 5m)" in protected[0]
    # In the order of their last time, as kubectl sorts events.
    assert [r.split()[1] for r in rows[1:]] == ["RemediationPausedByUser", "Protected", "Scaled"]
    assert "60s (x2 over 90s)" in rows[3]


def test_a_browser_pools_conditions_show_their_age(capsys: pytest.CaptureFixture[str]) -> None:
    data = browser_pool()
    data["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "Converged", "lastTransitionTime": iso(600)}
    ]
    print_browser_description(data)
    rows = section(capsys.readouterr().out, "Conditions")
    assert rows[0].split() == ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]
    assert rows[1].split() == ["Ready", "True", "Converged", "10m", "-"]


# ---------------------------------------------------------------- item 10: rollout figures


def rolling(updated: int, desired: int, message: str = "") -> dict[str, Any]:
    data = device_pool(
        desiredReplicas=desired,
        updatedDevices=updated,
        conditions=[
            {"type": "RollingOut", "status": "True", "reason": "Drifted", "message": message}
        ],
    )
    data["spec"] |= {"replicas": desired, "rollout": {"maxSurge": 1, "maxUnavailable": 0}}
    return data


def test_describe_never_shows_more_updated_than_desired(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # After a scale-down from 4 to 2 the surplus is still there: 4 made from the
    # current template, 2 wanted.
    print_description(rolling(updated=4, desired=2))
    line = field(capsys.readouterr().out, "Rollout")
    assert line.startswith("2/2 updated"), line


def test_describe_says_a_rollout_is_complete(capsys: pytest.CaptureFixture[str]) -> None:
    # A spend cap holds the pool at 3 of 4: every device it has is on the current
    # template, so the rollout is done though 3 < 4.
    data = rolling(updated=3, desired=4)
    data["status"]["conditions"][0] |= {"status": "False", "reason": "Complete"}
    print_description(data)
    line = field(capsys.readouterr().out, "Rollout")
    assert line.startswith("complete: 3 device(s) on the current template"), line
    assert "maxSurge 1, maxUnavailable 0" in line


def test_get_shows_rollout_progress_beside_the_phase() -> None:
    pool = PoolSummary(
        name="p1",
        spec={"replicas": 4, "rollout": {"maxSurge": 1}},
        status=rolling(updated=2, desired=4)["status"] | {"phase": "Ready"},
    )
    row = dict(zip(DEVICE_POOL.columns, pool_row(pool), strict=True))
    assert row["PHASE"] == "Ready (rollout 2/4)"
    done = PoolSummary(name="p1", spec={"replicas": 4}, status={"phase": "Ready"})
    assert dict(zip(DEVICE_POOL.columns, pool_row(done), strict=True))["PHASE"] == "Ready"


# ---------------------------------------------------------------- item 11: every section


FULL_SPEC: dict[str, Any] = {
    "provider": {"name": "bitcloudphone", "account": "default"},
    "platform": "android",
    "region": "us-west",
    "osVersion": "14",
    "replicas": 4,
    "proxy": {"poolRef": "proxyseller-us", "sessionTTL": "15m"},
    "health": {"maxUnhealthy": "25%", "offlineAfter": "2m"},
    "scaleDown": {},
    "spendCap": {"maxDevices": 8},
    "lifetime": {"maxAge": "24h", "gracePeriod": "2h"},
    "rollout": {"maxSurge": 1, "maxUnavailable": 0},
    "disruption": {
        "budgets": [
            {
                "devices": "10%",
                "reasons": ["Drifted", "Expired"],
                "schedule": "0 9 * * mon-fri",
                "duration": "8h",
            },
            {"devices": 0},
        ]
    },
    "reserve": {"keep": 2},
    "leases": {
        "maxDuration": "30m",
        "idleTimeout": "2m",
        "queue": {"max": 5, "maxWait": "1m"},
        "onRelease": "reset",
    },
}


def test_describe_shows_every_spec_section(capsys: pytest.CaptureFixture[str]) -> None:
    data = device_pool(offlineAfterSeconds=120.0, startupTimeoutSeconds=300.0)
    data["spec"] = FULL_SPEC | {"autoscale": {"minReplicas": 0, "maxReplicas": 80}}
    print_description(data)
    out = capsys.readouterr().out
    assert field(out, "Lifetime") == "maxAge 24h, gracePeriod 2h"
    assert field(out, "Disruption") == (
        "10% for Drifted, Expired when 0 9 * * mon-fri for 8h; 0 for every reason"
    )
    assert field(out, "Reserve") == "keep 2"
    assert field(out, "Lease rules") == (
        "maxDuration 30m, idleTimeout 2m, queue max 5, maxWait 1m, onRelease reset"
    )
    assert "spendCap maxDevices 8" in field(out, "Spend")
    assert "maxSurge 1, maxUnavailable 0" in field(out, "Rollout")
    # A section this build does not know yet is shown as written, not left out.
    assert field(out, "Autoscale") == "minReplicas 0, maxReplicas 80"


def test_describe_shows_the_values_in_force_the_workers_as_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = device_pool(offlineAfterSeconds=120.0, startupTimeoutSeconds=300.0, idleGraceSeconds=60)
    data["spec"]["health"] = {"maxUnhealthy": "25%", "offlineAfter": "2m"}
    print_description(data)
    out = capsys.readouterr().out
    assert field(out, "Health") == (
        "maxUnhealthy 25%, offlineAfter 2m, startupTimeout 5m (the worker's)"
    )
    assert field(out, "Scale-down") == "idleGrace 1m (the worker's)"
    # Unset leases are the defaults every pool has.
    assert field(out, "Lease rules") == (
        "maxDuration 1h, idleTimeout 5m, queue max 50, maxWait 5m, onRelease keep"
    )
    assert "worker's setting" not in out


def test_describe_of_a_pool_on_an_older_worker_says_the_worker_decides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_description(device_pool())  # a status without the intervals in force
    out = capsys.readouterr().out
    assert field(out, "Scale-down") == "idleGrace: the worker's (not reported)"


def test_describe_shows_every_browser_pool_section(capsys: pytest.CaptureFixture[str]) -> None:
    data = browser_pool()
    data["spec"] |= {
        "nodeSelector": {"zone": "eu"},
        "fingerprint": {"coreVersion": "124", "ostype": "PC"},
        "proxy": {"poolRef": "proxyseller-eu", "sessionTTL": "15m"},
        "groupId": "2c9c29a2824c6b1a01825e01d3b10071",
        "health": {"maxUnhealthy": "2", "failureStreakLimit": 5},
    }
    data["status"] |= {"failureStreakLimit": 5, "nodeLostAfterSeconds": 120.0}
    print_browser_description(data)
    out = capsys.readouterr().out
    assert field(out, "Node selector") == "zone=eu"
    assert field(out, "Fingerprint") == "coreVersion 124, ostype PC"
    assert field(out, "Proxy") == "proxyseller-eu (session 15m)"
    assert field(out, "Group") == "2c9c29a2824c6b1a01825e01d3b10071"
    assert field(out, "Health") == (
        "maxUnhealthy 2, failureStreakLimit 5, nodeLostAfter 2m (the worker's)"
    )
    assert field(out, "Lease rules").startswith("maxDuration 1h")
    print_browser_description(browser_pool(failureStreakLimit=3, nodeLostAfterSeconds=90.0))
    out = capsys.readouterr().out
    assert field(out, "Fingerprint") == "a random one per profile"
    # Unset in the spec: the worker's limit, as the number the pool runs by (item 11).
    assert field(out, "Health") == (
        "maxUnhealthy 40%, failureStreakLimit 3 (the worker's), nodeLostAfter 1m30s (the worker's)"
    )
    # A worker from before the status said them.
    print_browser_description(browser_pool())
    assert field(capsys.readouterr().out, "Health") == (
        "maxUnhealthy 40%, failureStreakLimit: the worker's (not reported), "
        "nodeLostAfter: the worker's (not reported)"
    )


# ---------------------------------------------------------------- item 5: both kinds alike


@pytest.mark.parametrize("kind", ["DevicePool", "BrowserPool"])
def test_describe_says_when_the_pool_was_created(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = device_pool() if kind == "DevicePool" else browser_pool()
    (print_description if kind == "DevicePool" else print_browser_description)(data)
    assert field(capsys.readouterr().out, "Created") == data["metadata"]["creationTimestamp"]


def summaries() -> list[PoolSummary]:
    return [
        PoolSummary(name="p1", spec={"replicas": 1}, status={"phase": "Ready"}),
        PoolSummary(
            name="b1", spec={"replicas": 2}, status={"phase": "Ready"}, kind=BROWSER_POOL.name
        ),
    ]


def test_the_mixed_get_table_names_a_pool_once_beside_its_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_pools(summaries(), [DEVICE_POOL, BROWSER_POOL])
    out = capsys.readouterr().out
    browser = out.split("\n\n")[1].splitlines()
    assert browser[0].split()[:2] == ["KIND", "NAME"]
    assert browser[1].split()[:2] == ["BrowserPool", "b1"]


def test_get_browserpools_names_them_bare_as_kubectl_get_pods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_pools(summaries()[1:], [BROWSER_POOL])
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "b1"


def test_get_of_every_kind_with_only_browser_pools_names_their_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No KIND column (one kind shown) though every kind was asked for: the name says it,
    # as `kubectl get all` does (`pod/NAME`).
    print_pools(summaries()[1:], [DEVICE_POOL, BROWSER_POOL])
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "browserpool/b1"


# ---------------------------------------------------------------- text as written


def test_a_message_in_brackets_prints_as_written_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a terminal the tables are rich's, which read `[...]` as markup: a provider's
    # `[/phone/list]` stopped `describe` with a MarkupError, `[red]` vanished.
    from devicepool.client import render

    monkeypatch.setattr(render, "_isatty", lambda stream: True)
    data = device_pool()
    data["events"] = [
        event("ListFailed", "POST [/phone/list] failed", 60, type="Warning"),
        event("Note", "kept [red] as is", 30),
    ]
    print_description(data)
    out = capsys.readouterr().out
    assert "[/phone/list]" in out
    assert "[red]" in out


# ---------------------------------------------------------------- issue 40: why this size


@pytest.mark.parametrize("kind", ["DevicePool", "BrowserPool"])
def test_describe_says_why_an_autoscaled_pool_has_its_size(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sized = {
        "type": "Autoscaling",
        "status": "True",
        "reason": "FromDemand",
        "message": "3 leased + 2 queued + buffer 2 = 7",
    }
    status = {
        "conditions": [sized],
        "desiredFromDemand": 7,
        "activeSchedule": "schedule[0]: at least 5 until 2026-12-06T20:00:00Z",
    }
    if kind == "DevicePool":
        print_description(device_pool(**status))
    else:
        print_browser_description(browser_pool(**status))
    out = capsys.readouterr().out
    assert field(out, "Sized by") == (
        "3 leased + 2 queued + buffer 2 = 7; schedule[0]: at least 5 until 2026-12-06T20:00:00Z"
    )
    # A pool without autoscale: its replicas, nothing to explain.
    print_description(device_pool())
    assert field(capsys.readouterr().out, "Sized by") == "-"
