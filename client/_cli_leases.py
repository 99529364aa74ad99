"""The lease commands: `lease`, `renew`, `release`, `leases`, for both kinds (docs/leases.md).

Exit codes beyond every command's (0 ok, 1 runtime, 2 bad input): 3 refused or gone (a
selector no device can match, a full queue, a pool being deleted; a renew of a lease no
longer held), 4 not granted (none free, or none within `--wait`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from devicepool.api.kinds import Kind
from devicepool.client import _connect, _leases
from devicepool.client._cli_kinds import first_kind, kind_to_change
from devicepool.client._cli_pools import one_pool_or_exit
from devicepool.client._cli_progress import wait_with_progress
from devicepool.client._cli_support import OutputOpt, duration_or_exit, fail, open_pools, run
from devicepool.client._kind_sides import side_of
from devicepool.client._results import iso, parse_time
from devicepool.client.errors import EXIT_BAD_INPUT, BadInput, DevicePoolError
from devicepool.client.render import (
    Output,
    print_data,
    print_fields,
    print_table,
    resolve_output,
    span,
)

PoolArg = Annotated[str, typer.Argument(help="the pool: NAME, or browserpool/NAME")]
LeaseArg = Annotated[str, typer.Argument(help="the lease id `devicepool lease` printed")]

LEASE_COLUMNS = ["LEASE", "DEVICE", "HOLDER", "AGE", "EXPIRES", "IDLE"]
TICKET_COLUMNS = ["TICKET", "POSITION", "HOLDER", "WAITED", "DEADLINE"]


def lease(
    pool: PoolArg,
    selector: Annotated[
        list[str] | None,
        typer.Option(
            "--selector",
            "-l",
            metavar="KEY=VALUE",
            help="k=v a device's labels must hold (repeat it, or k=v,k2=v2); a DevicePool's "
            "devices carry region, platform, device (their id) and their provider labels",
        ),
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="DURATION",
            help="how long (10m, 1h); default and at most: the pool's maxDuration",
        ),
    ] = None,
    wait: Annotated[
        str | None,
        typer.Option(
            "--wait",
            metavar="DURATION",
            help="wait this long in the pool's queue (60s) when none is free, at most its "
            "queue.maxWait; default: do not wait (exit 4 at once)",
        ),
    ] = None,
    holder: Annotated[
        str | None,
        typer.Option(
            "--holder",
            metavar="NAME",
            help="who holds it, as `leases` shows it (default: user@host)",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Lease a ready device of a pool; renew it within idleTimeout, release it when done.

    Prints the lease (-o json: {"lease", "pool", "device", "holder", "expiresAt",
    "connect"}; `connect`: the device's ADB login or CDP endpoint when history is
    encrypted, else {"ref": "devicepool connect POOL LEASE"}, the command that reads it).
    The lease id is what `renew` and `release` name. Exit 0 granted; 3 refused (no device
    can ever match, the queue is full, the pool is being deleted); 4 none free, or none
    within --wait; 2 bad input; 1 no stack or another failure."""
    fmt = resolve_output(output)
    kinds, name = one_pool_or_exit(pool)
    seconds = None if duration is None else duration_or_exit("--for", duration)
    waiting = 0.0 if wait is None else _wait_or_exit(wait)
    try:  # every input checked before anything is contacted
        _leases.lease_request(
            selector=selector, duration=seconds, wait=waiting, holder=_holder(holder)
        )
    except BadInput as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None

    async def body() -> tuple[Kind, _leases.Lease, dict[str, Any]]:
        client = await open_pools(name)
        kind = await kind_to_change(client, kinds, name)

        async def go(cb: Any) -> _leases.Lease:
            def progress(place: dict[str, Any]) -> None:
                if cb is not None:
                    cb(place)

            leased: _leases.Lease = await client.acquire_lease(
                name,
                kind=kind.name,
                selector=selector,
                duration=seconds,
                wait=waiting,
                holder=_holder(holder),
                on_progress=progress,
            )
            return leased

        (leased,) = await wait_with_progress(
            {f"{kind.resource}/{name}": go},
            total_key="position",
            done_key="ahead",
            label="ahead in the queue",
            countdown=True,
        )
        ref = _connect.connect_ref(pool, leased.id)
        if fmt == Output.TABLE or not _connect.encrypts(client):
            return kind, leased, ref
        try:  # the lease is held whatever this answers
            info = await _leases.or_given_back(  # a Ctrl-C before the id is printed: released
                client, name, leased, client.lease_connect(name, leased, kind=kind.name)
            )
        except DevicePoolError as err:
            return kind, leased, {**ref, "message": str(err)}
        return kind, leased, _connect.connect_json(info)

    kind, leased, connect = run(body)
    shown = lease_json(leased, side_of(kind).named(name), connect)
    if fmt != Output.TABLE:
        print_data(shown, fmt)
        return
    waited = f" (waited {leased.waited_seconds:.0f}s)" if leased.waited_seconds else ""
    print_fields(
        [
            ("Lease", leased.id),
            ("Pool", shown["pool"]),
            ("Device", leased.device),
            ("Holder", leased.holder),
            ("Expires", f"{shown['expiresAt']} (in {span(_left(leased.expires_at))}){waited}"),
            ("Connect", connect["ref"]),
        ]
    )


def renew(
    pool: PoolArg,
    lease_id: LeaseArg,
    duration: Annotated[
        str | None,
        typer.Option(
            "--for",
            metavar="DURATION",
            help="from now (10m); default: as long as it was taken for; never past maxDuration",
        ),
    ] = None,
) -> None:
    """Renew a lease (its idle clock starts again); exit 3 if it is gone."""
    kinds, name = one_pool_or_exit(pool)
    seconds = None if duration is None else duration_or_exit("--for", duration)

    async def body() -> str:
        client = await open_pools(name)
        kind = await kind_to_change(client, kinds, name)
        renewed = await client.renew_lease(name, lease_id, duration=seconds, kind=kind.name)
        left = span(_left(renewed.expires_at))
        return f"{kind.resource}/{name}: lease {renewed.id} on {renewed.device} renewed until {iso(renewed.expires_at)} (in {left})"

    typer.echo(run(body))


def release(
    pool: PoolArg,
    lease_id: LeaseArg,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="the device is not leased again: a new one is made"),
    ] = False,
) -> None:
    """Release a lease (or drop a waiting ticket); releasing again is no error (exit 0)."""
    kinds, name = one_pool_or_exit(pool)

    async def body() -> str:
        client = await open_pools(name)
        kind = await kind_to_change(client, kinds, name)
        answer = await client.release_lease(name, lease_id, replace=replace, kind=kind.name)
        if answer.reason == "Cancelled":
            said = f"ticket {lease_id} dropped"
        elif not answer.released_now and " ended at " in answer.message:
            # (by the lease's id or its ask's: the pool's words name the lease)
            said = f"{lease_id} had ended already: {answer.message}"  # how, in the pool's words
        else:
            said = f"lease {lease_id} released: {answer.message or answer.reason}"
        return f"{kind.resource}/{name}: {said}"

    typer.echo(run(body))


def leases(pool: PoolArg, output: OutputOpt = None) -> None:
    """The leases of a pool (LEASE DEVICE HOLDER AGE EXPIRES IDLE), then its queue."""
    fmt = resolve_output(output)
    kinds, name = one_pool_or_exit(pool)

    async def body() -> Any:
        client = await open_pools(name)
        _, view = await first_kind(kinds, lambda k: client.leases(name, kind=k.name))
        return view

    view = run(body)
    data = view.model_dump(mode="json", by_alias=True)
    if fmt != Output.TABLE:
        print_data({"leases": data["leases"], "tickets": data["tickets"]}, fmt)
        return
    if not view.leases and not view.tickets:
        typer.echo(f"No leases in {pool}.", err=True)
        return
    now = datetime.now(UTC)
    print_table(LEASE_COLUMNS, [lease_row(x, now) for x in view.leases])
    if view.tickets:
        typer.echo("")
        rows = [ticket_row(t, i + 1, now) for i, t in enumerate(view.tickets)]
        print_table(TICKET_COLUMNS, rows)


# ---------------------------------------------------------------- what they print


def lease_json(
    leased: _leases.Lease, pool: str, connect: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`lease -o json`: exactly these keys (docs/leases.md)."""
    return {
        "lease": leased.id,
        "pool": pool,
        "device": leased.device,
        "holder": leased.holder,
        "expiresAt": iso(leased.expires_at),
        "connect": connect,
    }


def lease_row(held: Any, now: datetime) -> list[Any]:
    holder = (held.holder or "-") + ("" if held.claimed else " (offered)")
    return [
        held.id,
        held.device,
        holder,
        span(_since(held.granted_at, now)),
        span(_left(held.expires_at, now)),
        span(_since(held.renewed_at, now)),
    ]


def ticket_row(ticket: Any, position: int, now: datetime) -> list[Any]:
    return [
        ticket.id,
        position,
        ticket.holder or "-",
        span(_since(ticket.created_at, now)),
        span(_left(ticket.deadline, now)),
    ]


def _since(when: Any, now: datetime | None = None) -> float:
    at = parse_time(when)
    return 0.0 if at is None else ((now or datetime.now(UTC)) - at).total_seconds()


def _left(when: Any, now: datetime | None = None) -> float:
    return -_since(when, now)


def _holder(holder: str | None) -> str:
    """The CLI's holder: `user@host` when not told, or told a blank (its own pid ends with it)."""
    return holder if holder is not None and holder.strip() else _leases.default_holder(pid=False)


def _wait_or_exit(text: str) -> float:
    """`--wait`: a duration of 0s or more; else exit 2."""
    return 0.0 if text.strip() in ("0", "0s") else duration_or_exit("--wait", text)
