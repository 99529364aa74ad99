"""The process commands: `worker`, `emulator`, `dev`, plus `setup` and `version`.

The composition root: the only commands that start the worker or the emulator, imported inside
the commands so the pool commands never load them."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

from devicepool.client._cli_support import fail, load_resources_or_exit, run
from devicepool.client._dev_config import DEFAULT_GEELARK_PORT, GEELARK_ACCOUNT, MAX_BROWSER_NODES
from devicepool.client.errors import EXIT_BAD_INPUT


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
    deployment_name: Annotated[
        str | None,
        typer.Option(
            "--deployment-name",
            help="serve as a version of this Temporal worker deployment (Worker Versioning; "
            "default: the config's deployment.name, else unversioned)",
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(
            "--build-id",
            help="this build's id (default: the package version and a digest of the workflow code)",
        ),
    ] = None,
    promote: Annotated[
        bool,
        typer.Option(
            "--promote", help="once polling, make this build the deployment's current version"
        ),
    ] = False,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="run as the node worker NAME beside a BitBrowser desktop client: its Local API "
            "activities on the queue devicepool-node-NAME, no workflows",
        ),
    ] = None,
    node_labels: Annotated[
        list[str] | None,
        typer.Option("--node-label", help="with --node: a label k=v pools select on (repeatable)"),
    ] = None,
    bitbrowser_url: Annotated[
        str | None,
        typer.Option(
            "--bitbrowser-url",
            help="with --node: the desktop client's Local API (default http://127.0.0.1:54345)",
        ),
    ] = None,
    bitbrowser_key_file: Annotated[
        Path | None,
        typer.Option("--bitbrowser-key-file", help="with --node: a file holding its x-api-key"),
    ] = None,
    node_heartbeat_seconds: Annotated[
        float | None,
        typer.Option("--node-heartbeat-seconds", help="with --node: seconds between beats (10)"),
    ] = None,
    node_account: Annotated[
        str | None,
        typer.Option(
            "--node-account", help="with --node: the BitBrowser account it is logged into"
        ),
    ] = None,
) -> None:
    """Run the worker: pool workflows, provider activities, one queue per account.

    With --node NAME: a node worker for BrowserPools (docs/browserpools.md).
    """
    # Bad flags exit 2 with one line, before connecting.
    main_only = {
        "--metrics-port": metrics_port is not None,
        "--deployment-name": deployment_name is not None,
        "--build-id": build_id is not None,
        "--promote": promote,
    }
    node_only = {
        "--node-label": bool(node_labels),
        "--bitbrowser-url": bitbrowser_url is not None,
        "--bitbrowser-key-file": bitbrowser_key_file is not None,
        "--node-heartbeat-seconds": node_heartbeat_seconds is not None,
        "--node-account": node_account is not None,
    }
    if node is not None and (given := [flag for flag, used in main_only.items() if used]):
        raise fail(f"{given[0]} is the main worker's flag, not a node worker's", EXIT_BAD_INPUT)
    if node is None and (given := [flag for flag, used in node_only.items() if used]):
        raise fail(f"{given[0]} is a node worker's flag: it needs --node NAME", EXIT_BAD_INPUT)
    from devicepool.worker.logs import setup_logging

    async def body() -> None:
        if node is None:
            from devicepool.worker.config import load_config, with_deployment
            from devicepool.worker.main import main_async

            cfg = load_config(config, metrics_port=metrics_port)
            cfg = with_deployment(cfg, name=deployment_name, build_id=build_id)
            setup_logging(cfg.log_format)
            await main_async(cfg, promote_self=promote)
            return
        from devicepool.activities.node_models import DEFAULT_NODE_HEARTBEAT_SECONDS
        from devicepool.worker.config_values import log_format
        from devicepool.worker.node import load_node_options, node_main_async

        options = load_node_options(
            node=node,
            labels=node_labels or [],
            bitbrowser_url=bitbrowser_url,
            key_file=bitbrowser_key_file,
            config=config,
            heartbeat_seconds=(
                DEFAULT_NODE_HEARTBEAT_SECONDS
                if node_heartbeat_seconds is None
                else node_heartbeat_seconds
            ),
            account=node_account or "",
        )
        setup_logging(log_format(os.environ))
        await node_main_async(options)

    run(body)


# Registered with `allow_extra_args`, `ignore_unknown_options` and no help
# option of its own: every argument goes to the emulator's own parser, the
# BitBrowser emulator's with `--bitbrowser`, the GeeLark one's with `--geelark` (anywhere
# among them).
def emulator(ctx: typer.Context) -> None:
    """Run an emulator: BitCloudPhone (see --help), BitBrowser (--bitbrowser) or GeeLark (--geelark)."""
    args = list(ctx.args)
    if GEELARK_FLAG in args:
        from devicepool.emulator.geelark.cli import main as geelark_main

        args.remove(GEELARK_FLAG)
        raise typer.Exit(geelark_main(args, prog=f"devicepool emulator {GEELARK_FLAG}"))
    if BITBROWSER_FLAG in args:
        from devicepool.emulator.bitbrowser.cli import main as bitbrowser_main

        args.remove(BITBROWSER_FLAG)
        raise typer.Exit(bitbrowser_main(args, prog=f"devicepool emulator {BITBROWSER_FLAG}"))
    from devicepool.emulator.cli import main as emulator_main

    raise typer.Exit(emulator_main(args))


BITBROWSER_FLAG = "--bitbrowser"
GEELARK_FLAG = "--geelark"


def dev(
    port: Annotated[int, typer.Option(help="Temporal gRPC port")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port")] = 8233,
    emulator_port: Annotated[int, typer.Option(help="emulator HTTP port")] = 8088,
    metrics_port: Annotated[int, typer.Option(help="worker /metrics port")] = 9464,
    data_dir: Annotated[
        Path, typer.Option(help="state: Temporal and emulator SQLite files, logs, config")
    ] = Path(".devicepool"),
    provision_seconds: Annotated[
        float, typer.Option(min=0, help="emulator: seconds a device takes to provision")
    ] = 45.0,
    terminate_seconds: Annotated[
        float, typer.Option(min=0, help="emulator: seconds a terminated device takes to go")
    ] = 5.0,
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
    orphan_grace_seconds: Annotated[
        float,
        typer.Option(min=0, help="worker: terminate devices whose pool has no workflow after this"),
    ] = 600.0,
    node_lost_after_seconds: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="worker: a node worker silent this long is lost; a BrowserPool's profiles there "
            "are made again elsewhere",
        ),
    ] = 120.0,
    apply_files: Annotated[
        list[str] | None,
        typer.Option(
            "--apply",
            help="apply these manifests (a file or a directory; repeatable; DevicePools and "
            "BrowserPools) once everything is up, on a new data dir only "
            "(a restart keeps your changes)",
        ),
    ] = None,
    encrypt: Annotated[
        bool,
        typer.Option(
            "--encrypt",
            help="encrypt history with a key of the data dir's and start a codec server for the "
            "Web UI (a data dir once encrypted stays so)",
        ),
    ] = False,
    codec_port: Annotated[
        int, typer.Option(min=1, max=65535, help="codec server port (with --encrypt)")
    ] = 8234,
    browser_nodes: Annotated[
        int,
        typer.Option(
            min=0,
            max=MAX_BROWSER_NODES,
            help="BitBrowser emulator nodes node-1..N of one account, each on a free port "
            "kept in the data dir for the next start (the banner lists them), each with a "
            "node worker labelled node=<name>",
        ),
    ] = 0,
    geelark: Annotated[
        bool,
        typer.Option(
            "--geelark",
            help=f"also the GeeLark Open API emulator (its team kept in the data dir) and the "
            f"worker's account {GEELARK_ACCOUNT} on it",
        ),
    ] = False,
    geelark_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help=f"GeeLark emulator port (with --geelark; default: the last one, kept in the "
            f"data dir, else {DEFAULT_GEELARK_PORT})",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the whole system locally: Temporal dev server + emulator + worker."""
    # Every option but --apply is the DevOptions field of its name (read before any other local).
    given = {name: value for name, value in locals().items() if name != "apply_files"}
    if geelark_port is not None and not geelark:
        raise fail("--geelark-port needs --geelark", EXIT_BAD_INPUT)
    from devicepool.client.dev import DevOptions, run_dev

    options = DevOptions(**given, apply=", ".join(apply_files) if apply_files else None)
    # A bad manifest exits 2 before anything starts.
    pools = [pool for path in apply_files or [] for pool in load_resources_or_exit(path)]
    code = run(lambda: run_dev(options, pools))
    if code:
        raise typer.Exit(code)


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


def version() -> None:
    """Print the devicepool and Temporal SDK versions."""
    typer.echo(f"devicepool {_version('devicepool')} (temporalio {_version('temporalio')})")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"
