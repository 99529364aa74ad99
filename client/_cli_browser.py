"""The pool commands for the second kind: `browserpool/NAME` and `browserpools`, as kubectl does.

`split_kind` reads how a command names its pool (`browserpool/NAME`,
`devicepool/NAME`, `browserpools`, or a bare NAME: a DevicePool); the
functions here are the BrowserPool halves of `_cli_pools`' commands, over
`BrowserPoolClient`, printing `browserpool/NAME ...` lines and tables.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import typer

from devicepool.api.names import KIND_BROWSER_POOL, KIND_BY_RESOURCE_NAME, KIND_DEVICE_POOL
from devicepool.api.v1beta1 import ConditionType
from devicepool.client._cli_views import POOL_HEADERS, pool_row
from devicepool.client._results import applied_verb
from devicepool.client._status import condition, configuration_problem
from devicepool.client._validation import validate_name
from devicepool.client.browser_pools import BrowserPoolClient, BrowserPoolSummary
from devicepool.client.errors import BadInput, DevicePoolError, PoolBlocked
from devicepool.client.render import age, print_fields, print_table
from devicepool.workflows.browserpool.status import LOCAL_API_REFUSED

__all__ = [
    "BROWSER_HEADERS",
    "apply_browser_pools",
    "browser_converged",
    "browser_rows",
    "open_browser_pools",
    "other_kind",
    "print_both_kinds",
    "print_browser_description",
    "print_browser_pools",
    "print_profiles",
    "split_kind",
    "wait_browser_pools",
    "wait_browser_ready",
]

BROWSER_HEADERS = ["NAME", "DESIRED", "READY", "OPEN", "LOST", "NODES", "AGE", "PHASE"]
PROFILE_HEADERS = ["ID", "SLOT", "NODE", "OPEN", "STATE"]


def split_kind(name: str | None) -> tuple[str, str | None]:
    """(kind, pool name or None) for `browserpool/NAME`, `browserpools`, or a bare NAME."""
    if name is None:
        return KIND_DEVICE_POOL, None
    if name.lower() in KIND_BY_RESOURCE_NAME:
        return KIND_BY_RESOURCE_NAME[name.lower()], None
    kind_name, slash, rest = name.partition("/")
    if slash:
        kind = KIND_BY_RESOURCE_NAME.get(kind_name.lower())
        if kind is None:
            known = ", ".join(sorted({k for k in KIND_BY_RESOURCE_NAME if not k.endswith("s")}))
            raise BadInput(f"{name}: unknown kind {kind_name!r} (known: {known})")
        return kind, rest
    return KIND_DEVICE_POOL, name


async def open_browser_pools(name: str | None = None) -> BrowserPoolClient:
    from devicepool.connect import connect

    if name is not None:
        validate_name(name)
    return BrowserPoolClient(await connect())


async def apply_browser_pools(pools: list[Any]) -> list[Any]:
    """Apply each BrowserPool, one line each (its answer, or its error on stderr)."""
    client = await open_browser_pools()
    answers: list[Any] = []
    for pool in pools:
        try:
            answer: Any = await client.apply(pool)
        except DevicePoolError as err:
            typer.echo(f"error: {err}", err=True)
            answers.append(err)
            continue
        answers.append(answer)
        typer.echo(
            f"browserpool/{pool.name} {applied_verb(answer)} (generation {answer.generation}, "
            f"replicas {answer.replicas})"
        )
    return answers


async def wait_browser_pools(pools: list[Any], answers: list[Any], *, timeout: float) -> None:
    """`apply --wait`: until each BrowserPool applied has its ready profiles."""
    client = await open_browser_pools()
    for pool, answer in zip(pools, answers, strict=True):
        await wait_browser_ready(client, pool.name, answer.generation, timeout)
        typer.echo(f"browserpool/{pool.name} ready")


def browser_converged(status: dict[str, Any], generation: int) -> bool:
    """The pool has seen `generation` and holds exactly its desired profiles, all ready
    (a scale-down's surplus deleted too)."""
    desired = int(status.get("desiredReplicas") or 0)
    placed = status.get("profileIds")
    held = len(placed) if isinstance(placed, list) else desired
    return (
        int(status.get("observedGeneration") or 0) >= generation
        and int(status.get("readyProfiles") or 0) == desired == held
    )


def refused_key(status: dict[str, Any], generation: int) -> dict[str, Any] | None:
    """`Ready=False LocalApiRefused` from a pass over `generation` or later: a node's Local
    API refuses its key, which waiting does not fix (the message names the node)."""
    if int(status.get("observedGeneration") or 0) < generation:
        return None
    ready = condition(status, ConditionType.READY)
    if ready and ready.get("status") == "False" and ready.get("reason") == LOCAL_API_REFUSED:
        return ready
    return None


async def wait_browser_ready(
    client: BrowserPoolClient, name: str, generation: int, timeout: float
) -> None:
    """`apply --wait` and `scale --wait` of a BrowserPool: until `browser_converged`."""
    deadline = time.monotonic() + timeout
    while True:
        status = (await client.summary(name)).status
        if browser_converged(status, generation):
            return
        problem = configuration_problem(status, generation) or refused_key(status, generation)
        if problem is not None:  # what waiting cannot fix: said at once, as for a DevicePool
            raise PoolBlocked(
                f"browserpool/{name}",
                "cannot become ready",
                str(problem.get("reason")),
                str(problem.get("message") or ""),
            )
        if time.monotonic() > deadline:
            raise DevicePoolError(
                f"browserpool/{name}: {status.get('readyProfiles', 0)}/"
                f"{status.get('desiredReplicas', 0)} ready after {timeout:g}s"
            )
        await asyncio.sleep(1.0)


def browser_rows(pools: list[BrowserPoolSummary]) -> list[list[Any]]:
    rows = []
    for p in pools:
        s = p.status
        nodes = ", ".join(f"{n}={c}" for n, c in (s.get("byNode") or {}).items()) or "-"
        rows.append(
            [
                f"browserpool/{p.name}",
                s.get("desiredReplicas", p.spec.get("replicas")),
                s.get("readyProfiles", 0),
                s.get("openProfiles", 0),
                s.get("lostProfiles", 0),
                nodes,
                age(p.created),
                # A phase read from search attributes (no worker answered) is marked `?`.
                s.get("phase", "Pending") + ("?" if p.stale else ""),
            ]
        )
    return rows


def print_browser_pools(pools: list[BrowserPoolSummary]) -> None:
    print_table(BROWSER_HEADERS, browser_rows(pools))


def print_both_kinds(pools: Sequence[Any], browsers: list[BrowserPoolSummary]) -> None:
    """`get` with pools of both kinds: a table per kind (their columns differ),
    each led by a KIND column, DevicePools first."""
    print_table(["KIND", *POOL_HEADERS], [[KIND_DEVICE_POOL, *pool_row(p)] for p in pools])
    typer.echo("")
    print_table(
        ["KIND", *BROWSER_HEADERS], [[KIND_BROWSER_POOL, *row] for row in browser_rows(browsers)]
    )


def print_profiles(profiles: list[dict[str, Any]]) -> None:
    print_table(
        PROFILE_HEADERS,
        [
            [p.get("id"), p.get("slot"), p.get("node"), p.get("open"), p.get("state")]
            for p in profiles
        ],
    )


def print_browser_description(data: dict[str, Any]) -> None:
    spec, status = data["spec"], data["status"]
    selector = ", ".join(f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items()) or "any"
    print_fields(
        [
            ("Name", f"browserpool/{data['metadata']['name']}"),
            ("Created", data["metadata"].get("creationTimestamp")),
            ("Node selector", selector),
            ("Open", spec.get("open", True)),
            ("Phase", status.get("phase")),
            (
                "Profiles",
                f"{status.get('desiredReplicas', spec.get('replicas'))} desired | "
                f"{status.get('readyProfiles', 0)} ready | {status.get('openProfiles', 0)} open | "
                f"{status.get('lostProfiles', 0)} lost",
            ),
            ("By node", ", ".join(f"{n}={c}" for n, c in (status.get("byNode") or {}).items())),
            ("Generation", f"observed {status.get('observedGeneration', '-')}"),
            ("Last reconciled", status.get("lastReconciled")),
        ]
    )
    typer.echo("\nConditions:")
    print_table(
        ["TYPE", "STATUS", "REASON", "MESSAGE"],
        [
            [c.get("type"), c.get("status"), c.get("reason"), c.get("message", "")]
            for c in status.get("conditions") or []
        ],
    )
    typer.echo("\nProfiles:")
    print_profiles(data.get("profiles") or [])
    typer.echo("\nEvents:")
    events = data.get("events") or []
    if not events:
        typer.echo("  <none>")
        return
    print_table(
        ["TYPE", "REASON", "AGE", "MESSAGE"],
        [
            [e.get("type"), e.get("reason"), age(e.get("time")), e.get("message", "")]
            for e in events
        ],
    )


async def other_kind(client: Any) -> list[BrowserPoolSummary]:
    """The BrowserPools beside a `get` of every DevicePool (none from a client without them)."""
    browsers = getattr(client, "browser_pool_client", None)
    return [] if browsers is None else await browsers().list_pools()
