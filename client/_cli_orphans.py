"""`devicepool orphans [--delete] [--account A ...] [-o table|json|yaml]`.

Asks each account's janitor to scan now and lists what it finds (age, cost so far);
`--delete` terminates them now. A device whose pool runs is never listed nor deleted. An
account whose janitor could not scan is one `error:` line on stderr and exit 1, after the other
accounts' answers. What an orphan is: docs/pools.md, 'Orphans: nothing bills that nobody asked
for'."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from devicepool.client._cli_support import OutputOpt, open_pools, run
from devicepool.client._results import parse_time
from devicepool.client.errors import EXIT_RUNTIME
from devicepool.client.render import Output, age, print_data, print_table, resolve_output

HEADERS = ["ID", "POOL", "ACCOUNT", "PLATFORM", "STATUS", "AGE", "COST", "POOL WORKFLOW", "SWEEP"]


def orphans(
    delete: Annotated[
        bool,
        typer.Option(
            "--delete",
            help="terminate every orphan now, grace or not (never a device whose pool runs)",
        ),
    ] = False,
    account: Annotated[
        list[str] | None,
        typer.Option(
            "--account",
            metavar="NAME",
            help="only this account (repeatable; default: every account's janitor)",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Devices whose pool has no running workflow: id, pool, account, age, cost so far."""
    fmt = resolve_output(output)

    async def body() -> list[Any]:
        client = await open_pools()
        return list(await client.orphans(delete=delete, accounts=account or None))

    data = orphan_data(run(body), now=datetime.now(UTC))
    if fmt != Output.TABLE:
        print_data(data, fmt)
    else:
        print_orphans(data, deleted=delete)
    failed = [a for a in data["accounts"] if a.get("lastError")]
    for report in failed:
        sys.stderr.write(f"error: account {report['account']}: {report['lastError']}\n")
    if failed:
        raise typer.Exit(EXIT_RUNTIME)


def orphan_data(reports: list[Any], *, now: datetime) -> dict[str, Any]:
    """The janitors' reports as the command prints them (camelCase, age and cost added)."""
    from devicepool.workflows.orphans.state import DEVICE_HOUR_USD, cost_usd

    def row(device: Any, account: str) -> dict[str, Any]:
        item = device.model_dump(mode="json", by_alias=True)
        item["account"] = account
        item["ageSeconds"] = round(max((now - device.created_at).total_seconds(), 0.0), 1)
        item["costUsd"] = cost_usd(device.created_at, now)
        return item

    return {
        "orphans": [row(o, r.account) for r in reports for o in r.orphans],
        "terminated": [row(d, r.account) for r in reports for d in r.terminated],
        "kept": [
            {"id": k.id, "account": r.account, "why": k.why}
            for r in reports
            for k in r.kept
            if not k.settled
        ],
        "accounts": [
            r.model_dump(mode="json", by_alias=True, exclude={"orphans", "terminated", "kept"})
            for r in reports
        ],
        "pricePerDeviceHourUsd": DEVICE_HOUR_USD,
    }


def print_orphans(data: dict[str, Any], *, deleted: bool) -> None:
    if deleted:
        gone = data["terminated"]
        cost = sum(d["costUsd"] for d in gone)
        typer.echo(f"terminated {len(gone)} orphaned device(s) ({_usd(cost)} billed so far)")
        if gone:
            _table(gone)
        for kept in data["kept"]:
            sys.stderr.write(f"kept {kept['id']} ({kept['account']}): {kept['why']}\n")
        if data["orphans"]:
            typer.echo("\nStill orphaned:")
    if not data["orphans"]:
        if not deleted:
            sys.stderr.write("No orphans found.\n")
        return
    _table(data["orphans"])
    cost = sum(d["costUsd"] for d in data["orphans"])
    typer.echo(
        f"\n{len(data['orphans'])} orphan(s), {_usd(cost)} so far at "
        f"${data['pricePerDeviceHourUsd']:.2f} per device-hour"
    )
    more = sum(a.get("orphansFound", 0) for a in data["accounts"]) - len(data["orphans"])
    if more > 0 and not deleted:
        typer.echo(f"({more} more, newer: each scan handles the oldest first)")


def _table(items: list[dict[str, Any]]) -> None:
    print_table(
        HEADERS,
        [
            [
                d["id"],
                d["pool"],
                d["account"],
                d.get("platform"),
                d.get("status"),
                age(d.get("createdAt")),
                _usd(d["costUsd"]),
                d.get("poolState"),
                _sweep(d.get("sweepAt")),
            ]
            for d in items
        ],
    )


def _usd(value: float) -> str:
    """Dollars to the cent; below a cent (a few minutes of one device), to a hundredth of one."""
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def _sweep(sweep_at: Any) -> str:
    """When the janitor terminates it ("in 8m"), or "due" when its grace has run out."""
    when, now = parse_time(sweep_at), datetime.now(UTC)
    if when is None:
        return "-"
    return "due" if when <= now else f"in {age(now, now=when)}"
