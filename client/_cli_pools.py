"""The pool commands: `apply`, `get`, `describe`, `devices`, `scale`, `delete`.

Each is a thin layer over `PoolClient`: it checks its input locally (exit 2,
nothing contacted), runs one async body through `run`, and prints the answer
as a line, a table (`_cli_views`) or `-o json|yaml`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from devicepool.api.conversion import API_VERSIONS, ConversionError, api_version_named
from devicepool.api.names import API_VERSION_STORED, KIND_BROWSER_POOL, KIND_DEVICE_POOL
from devicepool.client._apply import tally
from devicepool.client._cli_browser import (
    apply_browser_pools,
    open_browser_pools,
    other_kind,
    print_both_kinds,
    print_browser_description,
    print_browser_pools,
    print_profiles,
    split_kind,
    wait_browser_pools,
    wait_browser_ready,
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
from devicepool.client._cli_views import (
    POOL_HEADERS,
    RowStream,
    pool_row,
    print_description,
    print_devices,
    print_pools,
)
from devicepool.client._results import applied_verb, iso
from devicepool.client._status import devices_left
from devicepool.client._validation import validate_name, validate_replicas
from devicepool.client.errors import (
    EXIT_BAD_INPUT,
    EXIT_RUNTIME,
    BadInput,
    DevicePoolError,
    PoolNotFound,
)
from devicepool.client.pool_client import APPLY_CONCURRENCY
from devicepool.client.render import Output, print_data, resolve_output

# `delete NAME` found no DevicePool but a BrowserPool of that name runs.
BROWSER_INSTEAD = object()
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
    pools = [r for r in resources if r.kind == KIND_DEVICE_POOL]
    browsers = [r for r in resources if r.kind == KIND_BROWSER_POOL]

    async def body() -> None:
        accepted = {}
        failures: list[DevicePoolError] = []
        answers: list[Any] = []

        def show(pool: Any, answer: Any) -> None:
            if isinstance(answer, DevicePoolError):
                failures.append(answer)
                typer.echo(f"error: {answer}", err=True)
                return
            accepted[pool.name] = answer
            typer.echo(
                f"devicepool/{pool.name} {applied_verb(answer)} (generation {answer.generation}, "
                f"replicas {answer.replicas})"
            )

        if pools:
            client = await open_pools()
            answers = await client.apply_many(pools, concurrency=concurrency, on_result=show)
        if browsers and not any(not isinstance(f, BadInput) for f in failures):
            more = await apply_browser_pools(browsers)
            failures.extend(a for a in more if isinstance(a, DevicePoolError))
            answers = [*answers, *more]
        if len(resources) > 1:
            # On stderr, so that stdout stays one line a pool for scripts, as kubectl's.
            typer.echo(tally(answers, len(resources)), err=True)
        if failures:
            refused_only = all(isinstance(f, BadInput) for f in failures)
            raise typer.Exit(EXIT_BAD_INPUT if refused_only else EXIT_RUNTIME)
        if wait and accepted:

            def waiter(name: str, generation: int) -> Callable[..., Awaitable[Any]]:
                async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
                    await client.wait_ready(
                        name, generation=generation, timeout=timeout, on_progress=cb
                    )

                return go

            await wait_with_progress(
                {name: waiter(name, acc.generation) for name, acc in accepted.items()},
                total_key="desiredReplicas",
                done_key="readyDevices",
                label="ready",
            )
            for name in accepted:
                typer.echo(f"devicepool/{name} ready")
        if wait and browsers:
            await wait_browser_pools(browsers, answers[len(pools) :], timeout=timeout)

    run(body)


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
    try:
        api_version = api_version_named(api_version, option="--api-version")
        bare = name is not None and "/" not in name
        kind, name = split_kind(name)
    except ConversionError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    except BadInput as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    if kind == KIND_BROWSER_POOL:
        get_browser_pools(name, fmt)
        return

    async def fetch(client: Any) -> list[Any]:
        if name is not None:
            return [await client.summary(name)]
        return list(await client.list_pools())

    if watch:
        try:
            run(lambda: watch_pools(fetch, fmt, name=name, api_version=api_version))
        except KeyboardInterrupt:  # Ctrl-C is how a watch ends, as kubectl's does
            pass
        return

    async def body() -> tuple[list[Any], list[Any]]:
        client = await open_pools(name)
        try:
            pools = await fetch(client)
        except PoolNotFound:
            if name is None or bare is False:
                raise
            # A bare NAME no DevicePool has: the BrowserPool of that name, if one runs.
            browsers = client.browser_pool_client()
            if not await browsers.running(name):
                raise
            return [], [await browsers.summary(name)]
        return pools, [] if name is not None else await other_kind(client)

    pools, browsers = run(body)
    if fmt != Output.TABLE:
        items = [p.to_resource(api_version) for p in pools]
        items += [browser_resource(b) for b in browsers]
        print_data(items[0] if name is not None else items, fmt)
        return
    if pools and browsers:
        print_both_kinds(pools, browsers)
    elif browsers:
        print_browser_pools(browsers)
    else:
        print_pools(pools)


def get_browser_pools(name: str | None, fmt: Output) -> None:
    """`get browserpools` and `get browserpool/NAME`."""

    async def body() -> list[Any]:
        client = await open_browser_pools(name)
        return [await client.summary(name)] if name is not None else await client.list_pools()

    pools = run(body)
    if fmt != Output.TABLE:
        items = [browser_resource(p) for p in pools]
        print_data(items[0] if name is not None else items, fmt)
        return
    if not pools:
        sys.stderr.write("No browser pools found.\n")
        return
    print_browser_pools(pools)


async def watch_pools(
    fetch: Callable[[Any], Awaitable[list[Any]]],
    fmt: Output,
    *,
    name: str | None,
    api_version: str = API_VERSION_STORED,
) -> None:
    """`get --watch`: print every pool, then each pool again when its figures change.

    Polls the pools' `status` every `WATCH_SECONDS`; AGE alone changing is no
    change. A watched pool that goes away is forgotten (printed again if it
    comes back); with `-o json|yaml` each change is one whole resource.
    """
    client = await open_pools(name)
    stream = RowStream(POOL_HEADERS)
    seen: dict[str, list[Any]] = {}
    first = True
    while True:
        try:
            pools = await fetch(client)
        except PoolNotFound:
            if first:
                raise
            pools = []
        changed = []
        for pool in pools:
            figures = pool_row(pool)
            del figures[POOL_HEADERS.index("AGE")]
            if seen.get(pool.name) != figures:
                seen[pool.name] = figures
                changed.append(pool)
        for gone in seen.keys() - {p.name for p in pools}:
            del seen[gone]
        if first and not pools and fmt == Output.TABLE:
            sys.stderr.write("No pools found.\n")
        first = False
        if changed and fmt == Output.TABLE:
            stream.print_rows([pool_row(p) for p in changed])
        elif changed:
            for pool in changed:
                if fmt == Output.YAML:
                    sys.stdout.write("---\n")
                print_data(pool.to_resource(api_version), fmt)
            sys.stdout.flush()
        await asyncio.sleep(WATCH_SECONDS)


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
    """Spec, status, conditions, devices and recent events of one pool (NAME, or
    browserpool/NAME for a BrowserPool: its profiles instead of devices)."""
    # Text wherever it goes (`describe POOL | less`): JSON only when asked for.
    fmt = output or Output.TABLE
    kind, pool = kind_or_exit(name)

    async def device() -> dict[str, Any]:
        return dict(await (await open_pools(pool)).describe(pool))

    async def browser() -> dict[str, Any]:
        return await (await open_browser_pools(pool)).describe(pool)

    kind, data = run(lambda: either_kind(kind, name, device, browser))
    if fmt != Output.TABLE:
        print_data(data, fmt)
        return
    if kind == KIND_BROWSER_POOL:
        print_browser_description(data)
        return
    print_description(data)


def devices(name: str, output: OutputOpt = None) -> None:
    """The devices of one pool (browserpool/NAME: the profiles of a BrowserPool)."""
    fmt = resolve_output(output)
    kind, pool = kind_or_exit(name)

    async def device() -> list[dict[str, Any]]:
        view = await (await open_pools(pool)).devices(pool)
        return [d.model_dump(mode="json", by_alias=True) for d in view.devices]

    async def browser() -> list[dict[str, Any]]:
        return await (await open_browser_pools(pool)).profiles(pool)

    kind, items = run(lambda: either_kind(kind, name, device, browser))
    if fmt != Output.TABLE:
        print_data(items, fmt)
        return
    if kind == KIND_BROWSER_POOL:
        print_profiles(items)
        return
    print_devices(items)


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
    named, (kind, name) = name, kind_or_exit(name)

    async def browser() -> None:
        pools = await open_browser_pools(name)
        answer = await pools.scale(name, replicas)
        typer.echo(
            f"browserpool/{name} scaled to {answer.replicas} (generation {answer.generation})"
        )
        if wait:
            await wait_browser_ready(pools, name, answer.generation, timeout)
            typer.echo(f"browserpool/{name} ready")

    async def body() -> None:
        validate_name(name)
        validate_replicas(replicas)  # before connecting: bad input changes nothing
        if kind == KIND_BROWSER_POOL:
            return await browser()
        client = await open_pools()
        await refuse_both_kinds(client, named, name)
        try:
            result = await client.scale(name, replicas)
        except PoolNotFound:
            if "/" in named:
                raise
            return await browser()  # a bare NAME no DevicePool has: the BrowserPool's
        typer.echo(
            f"devicepool/{name} scaled to {result.replicas} (generation {result.generation})"
        )
        if not wait:
            return

        async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
            await client.wait_ready(
                name, generation=result.generation, timeout=timeout, on_progress=cb
            )

        await wait_with_progress(
            {name: go}, total_key="desiredReplicas", done_key="readyDevices", label="ready"
        )
        typer.echo(f"devicepool/{name} ready")

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
) -> None:
    """Delete a pool: tear every device down (browserpool/NAME: every profile), then end
    the workflow."""
    named, (kind, name) = name, kind_or_exit(name)
    if kind == KIND_BROWSER_POOL:
        delete_browser_pool(name, ignore_not_found=ignore_not_found, wait=wait, timeout=timeout)
        return

    async def body() -> Any:
        validate_name(name)
        client = await open_pools()
        await refuse_both_kinds(client, named, name)
        try:
            return await delete_one(client)
        except PoolNotFound:
            if "/" not in named and await client.browser_pool_client().running(name):
                return BROWSER_INSTEAD  # a bare NAME no DevicePool has: the BrowserPool's
            if ignore_not_found:
                return None
            raise

    async def delete_one(client: Any) -> Any:
        if not wait:
            return await client.delete(name, wait=False)
        result: Any = None

        async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
            nonlocal result

            def progress(status: dict[str, Any]) -> None:
                if cb is not None:
                    cb({"left": devices_left(status), "total": None})

            result = await client.delete(name, wait=True, timeout=timeout, on_progress=progress)

        await wait_with_progress(
            {name: go}, total_key="total", done_key="left", label="devices left", countdown=True
        )
        return result

    result = run(body)
    if result is BROWSER_INSTEAD:
        delete_browser_pool(name, ignore_not_found=ignore_not_found, wait=wait, timeout=timeout)
        return
    if result is None:  # --ignore-not-found, and there was nothing to delete
        return
    if result.closed:
        typer.echo(f"devicepool/{name} deleted ({result.devices_left} devices left)")
        if result.profiles_retired:
            typer.echo(
                f"{result.profiles_retired} cloud-phone profile(s) kept, powered off and marked "
                "retired: the BitBrowser Local API has no delete"
            )
    else:
        typer.echo(f"devicepool/{name} deleting (use --wait to follow the teardown)")


async def refuse_both_kinds(client: Any, named: str, name: str) -> None:
    """A bare NAME that a DevicePool and a BrowserPool both have, for a command that changes
    a pool: which one is meant is not guessed (reads show the DevicePool, docs/browserpools.md)."""
    if "/" in named:
        return
    if await client.running(name) and await client.browser_pool_client().running(name):
        raise BadInput(
            f'both a DevicePool and a BrowserPool are named "{name}": '
            f"say devicepool/{name} or browserpool/{name}"
        )


def delete_browser_pool(
    name: str, *, ignore_not_found: bool, wait: bool = False, timeout: float = 300.0
) -> None:
    """`delete browserpool/NAME`: the pool closes and deletes every profile, then ends
    (`wait`: until it has ended)."""

    async def body() -> bool:
        try:
            await (await open_browser_pools(name)).delete(name, wait=wait, timeout=timeout)
        except PoolNotFound:
            if ignore_not_found:
                return False
            raise
        return True

    if not run(body):
        return  # --ignore-not-found, and there was nothing to delete
    if wait:
        typer.echo(f"browserpool/{name} deleted (every profile closed and deleted)")
    else:
        typer.echo(
            f"browserpool/{name} deleting (every profile is closed and deleted on its node; "
            f"`devicepool get browserpool/{name}` follows it)"
        )


async def either_kind(
    kind: str,
    named: str,
    device: Callable[[], Awaitable[Any]],
    browser: Callable[[], Awaitable[Any]],
) -> tuple[str, Any]:
    """The kind that answered, and its answer: a BrowserPool's for `browserpool/NAME`, else
    the DevicePool's, or for a bare NAME no DevicePool has, the BrowserPool's of that name."""
    if kind == KIND_BROWSER_POOL:
        return kind, await browser()
    try:
        return kind, await device()
    except PoolNotFound:
        if "/" in named:
            raise
        try:
            return KIND_BROWSER_POOL, await browser()
        except PoolNotFound:
            pass
        raise


def kind_or_exit(name: str) -> tuple[str, str]:
    """The kind and pool a command names (`browserpool/NAME`, or a DevicePool's NAME)."""
    try:
        kind, pool = split_kind(name)
    except BadInput as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    if pool is None:
        raise fail(f"{name}: name one pool, as browserpool/NAME", EXIT_BAD_INPUT)
    return kind, pool


def browser_resource(pool: Any) -> dict[str, Any]:
    """A BrowserPool as `get -o json|yaml` shows it (the stored version)."""
    metadata: dict[str, Any] = {"name": pool.name}
    if pool.created is not None:
        metadata["creationTimestamp"] = iso(pool.created)
    return {
        "apiVersion": API_VERSION_STORED,
        "kind": KIND_BROWSER_POOL,
        "metadata": metadata,
        "spec": pool.spec,
        "status": pool.status,
    }
