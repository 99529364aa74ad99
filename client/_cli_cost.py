"""`devicepool cost [POOL] [--since 24h]`: device-hours and money per pool and per account.

Sums each pool's hourly `cost` buckets (a week of them); `--since` takes the hours that began at
or after then, so it may count up to an hour more than asked (the table's first line says
from when). Why the provider's bill is a
little higher: docs/pools.md, 'Spend: what a pool costs, and a cap'."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from devicepool.client._cli_support import OutputOpt, duration_or_exit, fail, open_pools, run
from devicepool.client.errors import EXIT_BAD_INPUT
from devicepool.client.render import Output, print_data, print_table, resolve_output
from devicepool.workflows.pool.state import BILLED_HOURS_KEPT

HEADERS = ["POOL", "ACCOUNT", "DEVICE-HOURS", "COST", "$/H"]
# The longest --since: what the pools keep by the hour.
KEPT = timedelta(hours=BILLED_HOURS_KEPT)


def cost(
    name: Annotated[str | None, typer.Argument(help="a pool name (default: every pool)")] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="only the last DURATION: 24h, 90m, 2d, at most 7d (whole hours counted; "
            "default: since each pool was created)",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Device-hours and money per pool and per account (what the pools saw billing)."""
    fmt = resolve_output(output)
    window = None if since is None else timedelta(seconds=duration_or_exit("--since", since))
    if window is not None and window > KEPT:  # it would count a week and say it counted more
        most = f"{BILLED_HOURS_KEPT // 24}d"
        raise fail(
            f"--since: at most {most} (the pools keep a week by the hour; without --since: "
            f"since each pool was created), got {since!r}",
            EXIT_BAD_INPUT,
        )

    async def body() -> list[Any]:
        return await (await open_pools(name)).costs(name)

    now = datetime.now(UTC)
    start = None if window is None else now - window
    report = cost_rows(run(body), since=start, now=now)
    if fmt != Output.TABLE:
        print_data(report, fmt)
        return
    print(cost_header(since, since=start, now=now))
    rows = [
        [
            p.get("pool") or f"(account {p['account']})",  # the pools, then each account's sum
            p["account"],
            _num(p["deviceHours"]),
            _money(p["cost"]),
            _money(p["hourlyCost"]),
        ]
        for p in [*report["pools"], *report["accounts"]]
    ]
    print_table(HEADERS, rows)


def cost_header(window: str | None, *, since: datetime | None, now: datetime) -> str:
    """The table's first line: the window as given and the hour it counts from, or that it
    counts everything (`since` None)."""
    if window is None or since is None:
        return f"Cost since each pool was created (to {_utc(now)})"
    return f"Cost over the last {window.strip()} (since {_utc(_hour_of(since))})"


def cost_rows(
    answers: list[tuple[str, Any]], *, since: datetime | None, now: datetime
) -> dict[str, Any]:
    """The report at `now`: one entry per pool (None answers shown as unknown) and per
    account; what the pools' devices billed since their last pass is added."""
    pools: list[dict[str, Any]] = []
    accounts: dict[str, dict[str, Any]] = {}
    for pool, answer in sorted(answers, key=lambda a: a[0]):
        if answer is None:
            pools.append({"pool": pool, "account": None, "deviceHours": None, "cost": None,
                          "hourlyCost": None})  # fmt: skip
            continue
        total_hours, total_dollars = answer.totals(now)
        if since is None:
            hours, dollars = total_hours, total_dollars
        else:
            floor = _hour_of(since)
            kept = [h for h in answer.hours if h.start >= floor]
            hours = sum(h.device_hours for h in kept) + total_hours - answer.device_hours_to_date
            dollars = sum(h.cost for h in kept) + total_dollars - answer.cost_to_date
        entry = {
            "pool": pool,
            "account": answer.account,
            "deviceHours": round(hours, 4),
            "cost": round(dollars, 4),
            "hourlyCost": answer.hourly_cost,
        }
        pools.append(entry)
        total = accounts.setdefault(
            answer.account,
            {"account": answer.account, "deviceHours": 0.0, "cost": 0.0, "hourlyCost": 0.0},
        )
        for key in ("deviceHours", "cost", "hourlyCost"):
            total[key] = round(total[key] + entry[key], 4)
    return {
        "since": None if since is None else since.isoformat().replace("+00:00", "Z"),
        "pools": pools,
        "accounts": [accounts[a] for a in sorted(accounts)],
    }


def _hour_of(at: datetime) -> datetime:
    """The start of `at`'s hour: the pools count by the hour, so a window starts there."""
    return at.replace(minute=0, second=0, microsecond=0)


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _money(value: float | None) -> str:
    return "?" if value is None else f"${value:.2f}"
