"""The `devicepool` command line: kubectl-like, a thin layer over `PoolClient`.

Exit codes (stable, for scripts):

    0  ok
    1  runtime failure: Temporal unreachable, pool not found, --wait timed out,
       a worker or the dev stack failed
    2  bad input: a bad manifest, flag, name or value (replicas 501), a bad
       worker config, or a change the pool's validator refused. Nothing was
       started or updated.

Errors go to stderr as one line (`error: ...`), never a traceback. Read
commands take `-o table|json|yaml`; the default is a table on a terminal and
JSON otherwise. The Temporal connection comes from the SDK's environment
configuration (`TEMPORAL_ADDRESS`, default 127.0.0.1:7233, `TEMPORAL_NAMESPACE`,
`TEMPORAL_API_KEY`, `TEMPORAL_PROFILE`, ...).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

try:  # typer >= 0.22 vendors click as typer._click; its exceptions are not click's
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - older typer on real click
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment]

from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, BadInput, DevicePoolError
from devicepool.client.render import (
    Output,
    age,
    print_data,
    print_fields,
    print_table,
    resolve_output,
)

T = TypeVar("T")

app = typer.Typer(
    name="devicepool",
    help="Keep pools of cloud phones at their declared size, on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

OutputOpt = Annotated[
    Output | None,
    typer.Option(
        "--output",
        "-o",
        help="table, json or yaml (default: table on a terminal, json otherwise)",
        case_sensitive=False,
    ),
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=0, help="seconds --wait waits before giving up")
]


# ---------------------------------------------------------------- plumbing


def fail(message: str, code: int) -> typer.Exit:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run an async command body; map devicepool errors to one line + exit code."""
    from devicepool.api.loader import ManifestError
    from devicepool.worker.config import ConfigError

    try:
        return asyncio.run(body())
    except DevicePoolError as err:
        raise fail(str(err), err.exit_code) from None
    except (ManifestError, ConfigError) as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None


async def _pools(name: str | None = None) -> Any:
    """A `PoolClient`; `name` is validated first, so a bad one never reaches Temporal."""
    from devicepool.client.pool_client import PoolClient, validate_name
    from devicepool.connect import connect

    if name is not None:
        validate_name(name)
    return PoolClient(await connect())


def _load(path: str) -> list[Any]:
    """The manifests' pools; a bad manifest exits 2 before anything is contacted."""
    from devicepool.api.loader import ManifestError, load_manifests

    try:
        return load_manifests(path)
    except ManifestError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None


# ---------------------------------------------------------------- pool commands


@app.command()
def apply(
    filename: Annotated[
        str, typer.Option("--filename", "-f", help="a manifest file, a directory of them, or -")
    ],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every pool is ready")] = False,
    timeout: TimeoutOpt = 300.0,
) -> None:
    """Start pools, or update their spec (atomic start-or-update)."""
    pools = _load(filename)  # a bad manifest exits 2 before anything is contacted

    async def body() -> None:
        client = await _pools()
        accepted = {}
        for pool in pools:
            result = await client.apply(pool)
            accepted[pool.name] = result
            verb = "created" if result.generation == 1 else "configured"
            typer.echo(
                f"devicepool/{pool.name} {verb} (generation {result.generation}, "
                f"replicas {result.replicas})"
            )
        if wait:

            def waiter(name: str, generation: int) -> Callable[..., Awaitable[Any]]:
                async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
                    await client.wait_ready(
                        name, generation=generation, timeout=timeout, on_progress=cb
                    )

                return go

            await _wait_with_progress(
                {name: waiter(name, acc.generation) for name, acc in accepted.items()},
                total_key="desiredReplicas",
                done_key="readyDevices",
                label="ready",
            )
            for name in accepted:
                typer.echo(f"devicepool/{name} ready")

    run(body)


@app.command()
def get(
    name: Annotated[str | None, typer.Argument(help="a pool name (default: every pool)")] = None,
    output: OutputOpt = None,
) -> None:
    """List pools: NAME PLATFORM REGION DESIRED READY PROV OFFLINE AGE PHASE."""
    fmt = resolve_output(output)

    async def body() -> list[Any]:
        client = await _pools(name)
        if name is not None:
            return [await client.summary(name)]
        return list(await client.list_pools())

    pools = run(body)
    if fmt != Output.TABLE:
        items = [p.to_resource() for p in pools]
        print_data(items[0] if name is not None else items, fmt)
        return
    if not pools:
        sys.stderr.write("No pools found.\n")
        return
    rows = []
    for p in pools:
        s, st = p.spec, p.status
        rows.append(
            [
                p.name,
                s.get("platform"),
                s.get("region"),
                st.get("desiredReplicas", s.get("replicas")),
                st.get("readyDevices"),
                st.get("provisioningDevices"),
                st.get("offlineDevices"),
                age(p.created),
                (st.get("phase") or "") + ("?" if p.stale else ""),
            ]
        )
    print_table(
        ["NAME", "PLATFORM", "REGION", "DESIRED", "READY", "PROV", "OFFLINE", "AGE", "PHASE"], rows
    )


@app.command()
def describe(name: str, output: OutputOpt = None) -> None:
    """Spec, status, conditions, devices and recent events of one pool."""
    fmt = resolve_output(output)

    async def body() -> dict[str, Any]:
        client = await _pools(name)
        return dict(await client.describe(name))

    data = run(body)
    if fmt != Output.TABLE:
        print_data(data, fmt)
        return
    spec, status, wf = data["spec"], data["status"], data["workflow"]
    proxy = spec.get("proxy") or {}
    print_fields(
        [
            ("Name", data["metadata"]["name"]),
            ("Workflow", f"{wf['id']} (run {wf['runId']}, {wf['status']})"),
            ("Created", data["metadata"].get("creationTimestamp")),
            ("Provider", spec.get("provider")),
            ("Platform", f"{spec.get('platform')} {spec.get('osVersion', '')}".strip()),
            ("Region", spec.get("region")),
            ("Account", spec.get("providerCredentialRef")),
            (
                "Proxy",
                f"{proxy.get('poolRef')} (sticky {proxy.get('stickyTTL', 0)}s)" if proxy else None,
            ),
            ("Phase", status.get("phase")),
            (
                "Replicas",
                f"{status.get('desiredReplicas', spec.get('replicas'))} desired | "
                f"{status.get('readyDevices', 0)} ready | {status.get('busyDevices', 0)} busy | "
                f"{status.get('provisioningDevices', 0)} provisioning | "
                f"{status.get('offlineDevices', 0)} offline",
            ),
            ("Generation", f"observed {status.get('observedGeneration', '-')}"),
            ("Last reconciled", status.get("lastReconciled")),
        ]
    )
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
            for c in status.get("conditions") or []
        ],
    )
    typer.echo("\nDevices:")
    devices = data.get("devices")
    if devices is None:
        typer.echo("  (no worker answered)")
    else:
        _device_table(devices)
    typer.echo("\nEvents:")
    print_table(
        ["AGE", "TYPE", "DETAIL"],
        [[age(e["time"]), e["type"], e["detail"]] for e in data.get("events") or []],
    )


@app.command()
def devices(name: str, output: OutputOpt = None) -> None:
    """The devices of one pool."""
    fmt = resolve_output(output)

    async def body() -> list[dict[str, Any]]:
        client = await _pools(name)
        view = await client.devices(name)
        return [d.model_dump(mode="json", by_alias=True) for d in view.devices]

    items = run(body)
    if fmt != Output.TABLE:
        print_data(items, fmt)
        return
    _device_table(items)


def _device_table(items: list[dict[str, Any]]) -> None:
    print_table(
        ["ID", "STATUS", "REGION", "AGE", "SESSION", "LAST ACTIVITY", "REASON"],
        [
            [
                d.get("id"),
                d.get("status"),
                d.get("region"),
                age(d.get("created_at") or d.get("createdAt")),
                d.get("session_active", d.get("sessionActive")),
                age(d.get("last_activity_at") or d.get("lastActivityAt")),
                d.get("reason"),
            ]
            for d in items
        ],
    )


@app.command()
def scale(
    name: str,
    replicas: Annotated[int, typer.Option("--replicas", help="desired device count (0..500)")],
) -> None:
    """Set a pool's replica count (validated by the pool, which answers)."""
    from devicepool.client.pool_client import validate_name, validate_replicas

    async def body() -> Any:
        validate_name(name)
        validate_replicas(replicas)  # before connecting: bad input changes nothing
        client = await _pools()
        return await client.scale(name, replicas)

    result = run(body)
    typer.echo(f"devicepool/{name} scaled to {result.replicas} (generation {result.generation})")


@app.command()
def delete(
    name: str,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait until every device is torn down")
    ] = False,
    timeout: TimeoutOpt = 300.0,
) -> None:
    """Delete a pool: tear every device down, then end the workflow."""
    from devicepool.client.pool_client import devices_left, validate_name

    async def body() -> Any:
        validate_name(name)
        client = await _pools()
        if not wait:
            return await client.delete(name, wait=False)
        result: Any = None

        async def go(cb: Callable[[dict[str, Any]], None] | None) -> None:
            nonlocal result

            def progress(status: dict[str, Any]) -> None:
                if cb is not None:
                    cb({"left": devices_left(status), "total": None})

            result = await client.delete(name, wait=True, timeout=timeout, on_progress=progress)

        await _wait_with_progress(
            {name: go}, total_key="total", done_key="left", label="devices left", countdown=True
        )
        return result

    result = run(body)
    if result.closed:
        typer.echo(f"devicepool/{name} deleted ({result.devices_left} devices left)")
    else:
        typer.echo(f"devicepool/{name} deleting (use --wait to follow the teardown)")


async def _wait_with_progress(
    waits: dict[str, Callable[..., Awaitable[Any]]],
    *,
    total_key: str,
    done_key: str,
    label: str,
    countdown: bool = False,
) -> None:
    """Run each wait with a live rich progress bar on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[shown]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        tasks = {
            name: progress.add_task(f"devicepool/{name}", total=None, shown="") for name in waits
        }
        initial: dict[str, int] = {}

        def callback(name: str) -> Callable[[dict[str, Any]], None]:
            def update(status: dict[str, Any]) -> None:
                done = int(status.get(done_key) or 0)
                if countdown:
                    first = initial.setdefault(name, max(done, 1))
                    progress.update(
                        tasks[name], total=first, completed=first - done, shown=f"{done} {label}"
                    )
                else:
                    total = int(status.get(total_key) or 0)
                    progress.update(
                        tasks[name],
                        total=max(total, 1),
                        completed=done if total else 1,
                        shown=f"{done}/{total} {label}",
                    )

            return update

        await asyncio.gather(*(wait(cb=callback(name)) for name, wait in waits.items()))


# ---------------------------------------------------------------- processes


@app.command()
def worker(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="worker config file (default: $DEVICEPOOL_CONFIG or devicepool.yaml)"
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=0, max=65535, help="/metrics, /healthz, /readyz port"),
    ] = None,
) -> None:
    """Run the worker: pool workflows, provider activities, one queue per account."""
    from devicepool.worker.config import load_config
    from devicepool.worker.logs import setup_logging
    from devicepool.worker.main import main_async

    async def body() -> None:
        cfg = load_config(config, metrics_port=metrics_port)
        setup_logging(cfg.log_format)
        await main_async(cfg)

    run(body)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def emulator(ctx: typer.Context) -> None:
    """Run the BitCloudPhone emulator (--host --port --account NAME=KEY ... ; see --help)."""
    from devicepool.emulator.cli import main as emulator_main

    raise typer.Exit(emulator_main(list(ctx.args)))


@app.command()
def dev(
    port: Annotated[int, typer.Option(help="Temporal gRPC port")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port")] = 8233,
    emulator_port: Annotated[int, typer.Option(help="emulator HTTP port")] = 8088,
    metrics_port: Annotated[int, typer.Option(help="worker /metrics port")] = 9464,
    data_dir: Annotated[Path, typer.Option(help="state: Temporal SQLite db, logs, config")] = Path(
        ".devicepool"
    ),
    provision_seconds: Annotated[
        float, typer.Option(min=0, help="emulator: seconds a device takes to provision")
    ] = 45.0,
    creates_per_minute: Annotated[
        int, typer.Option(min=1, help="emulator and worker: account creation window")
    ] = 20,
    resync_seconds: Annotated[float, typer.Option(min=0.1, help="worker: resync interval")] = 30.0,
    health_seconds: Annotated[
        float, typer.Option(min=0.1, help="worker: health check interval")
    ] = 60.0,
    offline_after_seconds: Annotated[
        float, typer.Option(min=0.1, help="worker: replace devices offline this long")
    ] = 180.0,
    startup_timeout_seconds: Annotated[
        float, typer.Option(min=0.1, help="worker: give up on a device provisioning this long")
    ] = 300.0,
    apply_file: Annotated[
        str | None,
        typer.Option("--apply", help="apply these manifests once everything is up"),
    ] = None,
) -> None:
    """Run the whole system locally: Temporal dev server + emulator + worker."""
    from devicepool.client.dev import DevOptions, run_dev

    options = DevOptions(
        port=port,
        ui_port=ui_port,
        emulator_port=emulator_port,
        metrics_port=metrics_port,
        data_dir=data_dir,
        provision_seconds=provision_seconds,
        creates_per_minute=creates_per_minute,
        resync_seconds=resync_seconds,
        health_seconds=health_seconds,
        offline_after_seconds=offline_after_seconds,
        startup_timeout_seconds=startup_timeout_seconds,
        apply=apply_file,
    )
    pools = _load(apply_file) if apply_file else []  # a bad manifest exits 2 before starting
    code = run(lambda: run_dev(options, pools))
    if code:
        raise typer.Exit(code)


@app.command()
def setup() -> None:
    """Register the pool search attributes on a Temporal cluster (idempotent)."""
    from devicepool.client.setup import register_search_attributes

    async def body() -> tuple[list[str], list[str]]:
        from devicepool.connect import connect

        return await register_search_attributes(await connect())

    added, present = run(body)
    for name in added:
        typer.echo(f"search attribute {name} registered")
    for name in present:
        typer.echo(f"search attribute {name} already registered")


@app.command()
def version() -> None:
    """Print the devicepool and Temporal SDK versions."""
    typer.echo(f"devicepool {_version('devicepool')} (temporalio {_version('temporalio')})")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """The console script (no `argv`): run, flush, and end the process with the exit code.

    Ending with `os._exit` is deliberate: the Temporal SDK's Rust runtime keeps
    native threads that can touch the GIL while the interpreter finalizes,
    which aborts the process (SIGABRT, exit 134) after the command already
    succeeded. Every command has finished its own cleanup by now.
    """
    if argv is not None:
        return run_cli(argv)
    code = run_cli(None)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_cli(argv: list[str] | None) -> int:
    """Parse and run one command; returns the exit code (usage errors: one line, exit 2)."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="devicepool", standalone_mode=False)
    except UsageError as err:
        hint = (
            f" (see `devicepool {err.ctx.info_name} --help`)" if err.ctx and err.ctx.parent else ""
        )
        sys.stderr.write(f"error: {err.format_message()}{hint}\n")
        return EXIT_BAD_INPUT
    except ClickException as err:
        sys.stderr.write(f"error: {err.format_message()}\n")
        return err.exit_code
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 130
    except BadInput as err:  # raised outside run(), e.g. while parsing
        sys.stderr.write(f"error: {err}\n")
        return EXIT_BAD_INPUT
    except DevicePoolError as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_RUNTIME
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
