"""The pool commands: `apply`, `get`, `describe`, `devices`, `scale`, `delete`, for every kind.

Each checks its input locally (exit 2, nothing contacted), runs one async body through `run` and
prints the answer; which kind it reaches and how it prints it is `_cli_kinds`'s."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from devicepool.api.conversion import API_VERSIONS, ConversionError, api_version_named
from devicepool.api.kinds import DEVICE_POOL, KINDS, Kind
from devicepool.api.names import API_VERSION_STORED
from devicepool.client._apply import tally
from devicepool.client._cli_kinds import (
    VIEWS,
    first_kind,
    kind_to_change,
    meant,
    print_pools,
    said_of,
    split_kind,
)
from devicepool.client._cli_progress import wait_with_progress
from devicepool.client._cli_support import (
    OutputOpt,
    TimeoutOpt,
    fail,
    load_resources_or_exit,
    open_pools,
    run,
)
from devicepool.client._kind_sides import side_of
from devicepool.client._pool_reads import RowWatch
from devicepool.client._results import applied_verb
from devicepool.client._validation import validate_name, validate_replicas
from devicepool.client.errors import (
    EXIT_BAD_INPUT,
    EXIT_RUNTIME,
    BadInput,
    DevicePoolError,
    PoolNotFound,
)
from devicepool.client.pool_client import APPLY_CONCURRENCY
from devicepool.client.render import Output, RowStream, print_data, print_table, resolve_output

# How often `get --watch` reads the pools again.
WATCH_SECONDS = 2.0


def apply(
    filename: Annotated[
        str, typer.Option("--filename", "-f", help="a manifest file, a directory of them, or -")
    ],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every pool is ready")] = False,
    timeout: TimeoutOpt = 300.0,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            min=1,
            help="pools applied at once (1: one after another); results print in file order",
        ),
    ] = APPLY_CONCURRENCY,
) -> None:
    """Start pools, or update their spec (atomic start-or-update).

    One line a pool (`devicepool/NAME created|configured|unchanged`) in the
    files' order, whichever pool answers first, so two runs print alike; with
    more than one pool, a count on stderr last. A bad manifest anywhere
    applies nothing (exit 2). A change a pool refuses is an error line for
    that pool while the others are applied (exit 2); any other failure stops
    starting more (exit 1).
    """
    # A bad manifest exits 2 before anything is contacted; both kinds may be mixed.
    resources = load_resources_or_exit(filename)

    async def body() -> None:
        accepted: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
        failures: list[DevicePoolError] = []
        answers: list[Any] = []

        def show(pool: Any, answer: Any) -> None:
            if isinstance(answer, DevicePoolError):
                failures.append(answer)
                typer.echo(f"error: {answer}", err=True)
                return
            accepted[pool.kind][pool.name] = answer
            typer.echo(
                f"{KINDS[pool.kind].resource}/{pool.name} {applied_verb(answer)} "
                f"(generation {answer.generation}, replicas {answer.replicas})"
            )

        client = None
        for kind in KINDS.values():  # DevicePools first; none after a failure not a refusal
            pools = [r for r in resources if r.kind == kind.name]
            if not pools or any(not isinstance(f, BadInput) for f in failures):
                continue
            client = client or await open_pools()
            answers += await client.apply_many(pools, concurrency=concurrency, on_result=show)
        if len(resources) > 1:
            # On stderr, so that stdout stays one line a pool for scripts, as kubectl's.
            typer.echo(tally(answers, len(resources)), err=True)
        if failures:
            refused_only = all(isinstance(f, BadInput) for f in failures)
            raise typer.Exit(EXIT_BAD_INPUT if refused_only else EXIT_RUNTIME)
        for kind in KINDS.values():
            if wait and accepted[kind.name]:
                await wait_ready(client, kind, accepted[kind.name], timeout=timeout)

    run(body)


async def wait_ready(client: Any, kind: Kind, accepted: dict[str, Any], *, timeout: float) -> None:
    """`--wait`: until each pool has converged on the generation it answered; a line each."""

    def waiter(name: str, generation: int) -> Callable[..., Awaitable[Any]]:
        async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
            await client.wait_ready(
                name, generation=generation, timeout=timeout, on_progress=cb, kind=kind.name
            )

        return go

    await wait_with_progress(
        {
            f"{kind.resource}/{name}": waiter(name, answer.generation)
            for name, answer in accepted.items()
        },
        total_key="desiredReplicas",
        done_key=side_of(kind).ready_key,
        label="ready",
    )
    for name in accepted:
        typer.echo(f"{kind.resource}/{name} ready")


def get(
    name: Annotated[str | None, typer.Argument(help="a pool name (default: every pool)")] = None,
    output: OutputOpt = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", "-w", help="after the list, print a pool again whenever it changes (Ctrl-C)"
        ),
    ] = False,
    api_version: Annotated[
        str,
        typer.Option(
            "--api-version",
            help=f"with -o json|yaml: the version to show the pools in ({', '.join(API_VERSIONS)};"
            " v1alpha1 or v1beta1 for short)",
        ),
    ] = API_VERSION_STORED,
) -> None:
    """List pools: NAME PLATFORM REGION DESIRED READY PROV PENDING OFFLINE $/H AGE PHASE.

    Both kinds: a KIND column leads when BrowserPools run too; `get browserpools` or
    `get browserpool/NAME` shows BrowserPools only (DESIRED READY OPEN LOST NODES AGE PHASE)."""
    fmt = resolve_output(output)
    # `get browserpool/NAME` names its row so, as `kubectl get pod/NAME` does.
    slashed = name is not None and "/" in name
    try:
        api_version = api_version_named(api_version, option="--api-version")
        kinds = meant(name)
        _, name = split_kind(name)
    except (ConversionError, BadInput) as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None

    # `get -w`: one List call of every pool, then one request a refresh (`RowWatch`).
    watching = RowWatch() if watch else None

    async def fetch(client: Any, ask: Callable[[Any], bool] | None = None) -> list[Any]:
        if name is not None:  # one pool: asked, so that a pool no worker answers says so (`?`)
            _, found = await first_kind(kinds, lambda k: client.summary(name, kind=k.name))
            return [found]
        # One List call for every kind; the table reads each pool's row from it (its memo).
        # -o json|yaml print the whole status (deviceIds, lastReconciled, costToDate): asked,
        # under -w only when `ask` says the pool's row changed.
        names = [k.name for k in kinds]
        if watching is not None:
            return await client.list_kinds(names, full=False, ask=ask, watch=watching)
        return await client.list_kinds(names, full=fmt != Output.TABLE)

    if watch:
        try:
            run(
                lambda: watch_pools(
                    fetch, fmt, kinds, name=name, named=slashed, api_version=api_version
                )
            )
        except KeyboardInterrupt:  # Ctrl-C is how a watch ends, as kubectl's does
            pass
        return

    async def body() -> list[Any]:
        return await fetch(await open_pools(name))

    pools = run(body)
    if fmt != Output.TABLE:
        items = [p.to_resource(api_version) for p in pools]
        print_data(items[0] if name is not None else items, fmt)
        return
    if slashed:
        (kind,) = kinds
        rows = VIEWS[kind.name].rows(pools)
        print_table(list(kind.columns), [[f"{kind.resource}/{r[0]}", *r[1:]] for r in rows])
        return
    print_pools(pools, kinds)


async def watch_pools(
    fetch: Callable[[Any, Callable[[Any], bool] | None], Awaitable[list[Any]]],
    fmt: Output,
    kinds: list[Kind],
    *,
    name: str | None,
    named: bool = False,
    api_version: str = API_VERSION_STORED,
) -> None:
    """`get --watch`: print every pool, then each pool again when its figures change.

    Reads the pools every `WATCH_SECONDS` (the table: one List call, each pool's row
    from its memo, then one request a refresh: a List call of the rows that moved, or one
    task queue's DescribeTaskQueue (`RowWatch`); one pool: its queries; -o json|yaml: the
    same, and the queries of a pool whose row changed since the last refresh, or that has
    none); AGE alone
    changing is no change. A watched pool that goes away is forgotten (printed again
    if it comes back); with `-o json|yaml` each change is one whole resource. Each
    kind has its own columns: rows of another kind than the last printed come
    under their header again, after a blank line, as `kubectl get all -w` does.
    """
    client = await open_pools(name)
    streams = {kind.name: RowStream(kind.columns) for kind in kinds}
    seen: dict[tuple[str, str], list[Any]] = {}
    # -o json|yaml: each pool's row as the last List call showed it (its figures).
    rows: dict[tuple[str, str], list[Any]] = {}

    def figures_of(pool: Any) -> list[Any]:
        figures = watch_row(pool, kinds, named=named)
        del figures[KINDS[pool.kind].columns.index("AGE")]
        return figures

    def row_moved(row: Any) -> bool:
        """Whether a pool's row differs from the last List call's (then it is asked)."""
        figures = figures_of(row)
        if rows.get((row.kind, row.name)) == figures:
            return False
        rows[(row.kind, row.name)] = figures
        return True

    last: str | None = None
    first = True
    while True:
        try:
            pools = await fetch(client, None if fmt == Output.TABLE else row_moved)
        except PoolNotFound:
            if first:
                raise
            pools = []
        changed = []
        for pool in pools:
            if pool.from_row and fmt != Output.TABLE:
                continue  # not asked: its row did not change since it was last asked
            figures = figures_of(pool)
            if seen.get((pool.kind, pool.name)) != figures:
                seen[(pool.kind, pool.name)] = figures
                changed.append(pool)
        listed = {(p.kind, p.name) for p in pools}
        for gone in seen.keys() - listed:
            del seen[gone]
        for gone in rows.keys() - listed:
            del rows[gone]
        if first and not pools and fmt == Output.TABLE:
            view = VIEWS[kinds[0].name if len(kinds) == 1 else DEVICE_POOL.name]
            sys.stderr.write(view.none_found + "\n")
        first = False
        if changed and fmt == Output.TABLE:
            for kind, run_of in itertools.groupby(changed, key=lambda p: p.kind):
                if last is not None and kind != last:
                    sys.stdout.write("\n")
                    streams[kind].head_again()
                streams[kind].print_rows([watch_row(p, kinds, named=named) for p in run_of])
                last = kind
        elif changed:
            for pool in changed:
                if fmt == Output.YAML:
                    sys.stdout.write("---\n")
                print_data(pool.to_resource(api_version), fmt)
            sys.stdout.flush()
        await asyncio.sleep(WATCH_SECONDS)


def watch_row(pool: Any, kinds: list[Kind], *, named: bool) -> list[Any]:
    """`get -w`'s row of a pool, named as `get` names it: `browserpool/NAME` when the command
    named its kind (`get browserpool/NAME`) or when the watch covers both kinds."""
    kind = KINDS[pool.kind]
    row = VIEWS[kind.name].rows([pool])[0]
    if named or (len(kinds) > 1 and kind is not DEVICE_POOL):
        row[0] = f"{kind.resource}/{row[0]}"
    return row


def describe(
    name: str,
    output: Annotated[
        Output | None,
        typer.Option(
            "--output",
            "-o",
            help="table (the default, terminal or not, as kubectl describe), json or yaml",
            case_sensitive=False,
        ),
    ] = None,
) -> None:
    """Spec, status, conditions, devices and recent events of one pool.

    NAME, or browserpool/NAME for a BrowserPool: its profiles instead of devices."""
    # Text wherever it goes (`describe POOL | less`): JSON only when asked for.
    fmt = output or Output.TABLE
    kinds, pool = one_pool_or_exit(name)

    async def body() -> tuple[Kind, dict[str, Any]]:
        client = await open_pools(pool)
        return await first_kind(kinds, lambda k: client.describe(pool, kind=k.name))

    kind, data = run(body)
    if fmt != Output.TABLE:
        print_data(data, fmt)
        return
    VIEWS[kind.name].print_description(data)


def devices(name: str, output: OutputOpt = None) -> None:
    """The devices of one pool (browserpool/NAME: the profiles of a BrowserPool)."""
    fmt = resolve_output(output)
    kinds, pool = one_pool_or_exit(name)

    async def body() -> tuple[Kind, list[dict[str, Any]]]:
        client = await open_pools(pool)
        return await first_kind(kinds, lambda k: VIEWS[k.name].items(client, pool))

    kind, items = run(body)
    if fmt != Output.TABLE:
        print_data(items, fmt)
        return
    VIEWS[kind.name].print_items(items)


def scale(
    name: str,
    replicas: Annotated[int, typer.Option("--replicas", help="desired device count (0..500)")],
    wait: Annotated[
        bool, typer.Option("--wait", help="wait until the pool has that many ready devices")
    ] = False,
    timeout: TimeoutOpt = 300.0,
) -> None:
    """Set a pool's replica count (validated by the pool, which answers); NAME or
    browserpool/NAME."""
    kinds, pool = one_pool_or_exit(name)

    async def body() -> None:
        validate_name(pool)
        validate_replicas(replicas)  # before connecting: bad input changes nothing
        client = await open_pools()
        kind = await kind_to_change(client, kinds, pool)
        with said_of(kinds):  # a bare NAME no kind has: not found as either
            result = await client.scale(pool, replicas, kind=kind.name)
        typer.echo(
            f"{kind.resource}/{pool} scaled to {result.replicas} (generation {result.generation})"
        )
        if wait:
            await wait_ready(client, kind, {pool: result}, timeout=timeout)

    run(body)


def delete(
    name: str,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait until every device is torn down")
    ] = False,
    timeout: TimeoutOpt = 300.0,
    ignore_not_found: Annotated[
        bool,
        typer.Option(
            "--ignore-not-found", help="a pool that does not exist is not an error (exit 0)"
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="end the pool's leases now (without it, leased devices are waited for up to 5m)",
        ),
    ] = False,
) -> None:
    """Delete a pool: tear every device down (browserpool/NAME: every profile), then end
    the workflow. Leased devices are given up to 5 minutes to be released first."""
    kinds, pool = one_pool_or_exit(name)

    async def body() -> Any:
        validate_name(pool)
        client = await open_pools()
        kind = await kind_to_change(client, kinds, pool)
        try:
            with said_of(kinds):
                return kind, await delete_one(client, kind)
        except PoolNotFound:
            if ignore_not_found:
                return None
            raise

    async def delete_one(client: Any, kind: Kind) -> Any:
        if not wait:
            return await client.delete(pool, wait=False, kind=kind.name, force=force)
        side = side_of(kind)

        async def go(cb: Callable[[dict[str, Any]], None] | None) -> Any:
            def progress(status: dict[str, Any]) -> None:
                if cb is not None:
                    cb({"left": side.left(status), "total": None})

            return await client.delete(
                pool, wait=True, timeout=timeout, on_progress=progress, kind=kind.name, force=force
            )

        (result,) = await wait_with_progress(
            {f"{kind.resource}/{pool}": go},
            total_key="total",
            done_key="left",
            label=f"{side.noun} left",
            countdown=True,
        )
        return result

    deleted = run(body)
    if deleted is None:  # --ignore-not-found, and there was nothing to delete
        return
    kind, result = deleted
    for line in VIEWS[kind.name].deleted(pool, result):
        typer.echo(line)


def one_pool_or_exit(name: str) -> tuple[list[Kind], str]:
    """The kinds a command's NAME may mean, and the pool's name (`browserpool/NAME`, NAME)."""
    try:
        kinds, (_, pool) = meant(name), split_kind(name)
    except BadInput as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    if pool is None:
        raise fail(f"{name}: name one pool, as browserpool/NAME", EXIT_BAD_INPUT)
    return kinds, pool
