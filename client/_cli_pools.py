"""The pool commands: `apply`, `get`, `describe`, `devices`, `scale`, `delete`.

Each is a thin layer over `PoolClient`: it checks its input locally (exit 2,
nothing contacted), runs one async body through `run`, and prints the answer
as a line, a table (`_cli_views`) or `-o json|yaml`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from devicepool.client._cli_progress import wait_with_progress
from devicepool.client._cli_support import OutputOpt, TimeoutOpt, load_or_exit, open_pools, run
from devicepool.client._cli_views import print_description, print_devices, print_pools
from devicepool.client._results import applied_verb
from devicepool.client._status import devices_left
from devicepool.client._validation import validate_name, validate_replicas
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, BadInput, DevicePoolError
from devicepool.client.pool_client import APPLY_CONCURRENCY
from devicepool.client.render import Output, print_data, resolve_output


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

    A bad manifest anywhere applies nothing (exit 2). A change a pool refuses
    is an error line for that pool while the others are applied (exit 2); any
    other failure stops starting more (exit 1).
    """
    pools = load_or_exit(filename)  # a bad manifest exits 2 before anything is contacted

    async def body() -> None:
        client = await open_pools()
        accepted = {}
        failures: list[DevicePoolError] = []

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

        await client.apply_many(pools, concurrency=concurrency, on_result=show)
        if failures:
            refused_only = all(isinstance(f, BadInput) for f in failures)
            raise typer.Exit(EXIT_BAD_INPUT if refused_only else EXIT_RUNTIME)
        if wait:

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

    run(body)


def get(
    name: Annotated[str | None, typer.Argument(help="a pool name (default: every pool)")] = None,
    output: OutputOpt = None,
) -> None:
    """List pools: NAME PLATFORM REGION DESIRED READY PROV PENDING OFFLINE AGE PHASE."""
    fmt = resolve_output(output)

    async def body() -> list[Any]:
        client = await open_pools(name)
        if name is not None:
            return [await client.summary(name)]
        return list(await client.list_pools())

    pools = run(body)
    if fmt != Output.TABLE:
        items = [p.to_resource() for p in pools]
        print_data(items[0] if name is not None else items, fmt)
        return
    print_pools(pools)


def describe(name: str, output: OutputOpt = None) -> None:
    """Spec, status, conditions, devices and recent events of one pool."""
    fmt = resolve_output(output)

    async def body() -> dict[str, Any]:
        client = await open_pools(name)
        return dict(await client.describe(name))

    data = run(body)
    if fmt != Output.TABLE:
        print_data(data, fmt)
        return
    print_description(data)


def devices(name: str, output: OutputOpt = None) -> None:
    """The devices of one pool."""
    fmt = resolve_output(output)

    async def body() -> list[dict[str, Any]]:
        client = await open_pools(name)
        view = await client.devices(name)
        return [d.model_dump(mode="json", by_alias=True) for d in view.devices]

    items = run(body)
    if fmt != Output.TABLE:
        print_data(items, fmt)
        return
    print_devices(items)


def scale(
    name: str,
    replicas: Annotated[int, typer.Option("--replicas", help="desired device count (0..500)")],
) -> None:
    """Set a pool's replica count (validated by the pool, which answers)."""

    async def body() -> Any:
        validate_name(name)
        validate_replicas(replicas)  # before connecting: bad input changes nothing
        client = await open_pools()
        return await client.scale(name, replicas)

    result = run(body)
    typer.echo(f"devicepool/{name} scaled to {result.replicas} (generation {result.generation})")


def delete(
    name: str,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait until every device is torn down")
    ] = False,
    timeout: TimeoutOpt = 300.0,
) -> None:
    """Delete a pool: tear every device down, then end the workflow."""

    async def body() -> Any:
        validate_name(name)
        client = await open_pools()
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
    if result.closed:
        typer.echo(f"devicepool/{name} deleted ({result.devices_left} devices left)")
    else:
        typer.echo(f"devicepool/{name} deleting (use --wait to follow the teardown)")
