"""`devicepool connect POOL LEASE`: how a lease's holder reaches its device (docs/leases.md,
"Connect info").

With a history key (DEVICEPOOL_ENCRYPTION_KEY_FILES) it asks the pool (update `lease_connect`).
Without one, or when the pool's worker writes history in clear, it checks the lease is held
(the `leases` query) and reads the provider itself with a worker config's accounts (`--config`):
nothing of it reaches Temporal. Exit 3 when the lease is not held."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from devicepool.activities.connect_models import ConnectInfo
from devicepool.api.kinds import Kind
from devicepool.api.names import KIND_BROWSER_POOL, QUERY_SPEC
from devicepool.client import _connect
from devicepool.client._cli_kinds import kind_to_change
from devicepool.client._cli_leases import LeaseArg, PoolArg
from devicepool.client._cli_pools import one_pool_or_exit
from devicepool.client._cli_support import OutputOpt, open_pools, run
from devicepool.client._kind_sides import side_of
from devicepool.client.errors import BadInput, DevicePoolError, LeaseGone, LeaseRefused
from devicepool.client.render import Output, print_data, print_fields, resolve_output

# Where `devicepool dev` writes its worker's config (its default `--data-dir`).
DEV_WORKER_CONFIG = Path(".devicepool") / "worker.yaml"

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="WORKER_CONFIG",
        help="the worker config whose account the pool rents from (read without encrypted "
        "history); default: $DEVICEPOOL_CONFIG, else `devicepool dev`'s "
        f"{DEV_WORKER_CONFIG}, else devicepool.yaml",
    ),
]


def connect(
    pool: PoolArg, lease_id: LeaseArg, config: ConfigOpt = None, output: OutputOpt = None
) -> None:
    """How to reach a leased device: a cloud phone's ADB login, a profile's CDP endpoint.

    Prints the lease's device and its connect info (-o json: {"lease", "pool", "device",
    "connect"}). Through the pool when history is encrypted; else read from the provider
    with the worker config's account (--config), outside Temporal. Exit 3 if the lease is
    not held; 2 bad input (a config without the pool's account); 1 another failure."""
    fmt = resolve_output(output)
    kinds, name = one_pool_or_exit(pool)

    async def body() -> tuple[Kind, Any, ConnectInfo]:
        client = await open_pools(name)
        kind = await kind_to_change(client, kinds, name)
        shown = side_of(kind).shown(name)
        view = await client.leases(name, kind=kind.name)
        held = next((x for x in view.leases if x.id == lease_id), None)
        if held is None or not held.claimed:
            why = "offered, not yet claimed" if held is not None else "not held"
            raise LeaseGone(f"{shown}: lease {lease_id} is {why} (`devicepool leases {pool}`)")
        if _connect.encrypts(client):
            try:
                return kind, held, await client.lease_connect(name, lease_id, kind=kind.name)
            except LeaseRefused:
                pass  # the pool's worker writes in clear: read it here instead
        return kind, held, await read_direct(client, kind, name, held.device, config)

    kind, held, info = run(body)
    shown = side_of(kind).named(name)
    said = {
        "lease": held.id,
        "pool": shown,
        "device": held.device,
        "connect": _connect.connect_json(info),
    }
    if fmt != Output.TABLE:
        print_data(said, fmt)
        return
    print_fields([("Lease", held.id), ("Pool", shown), ("Device", held.device), *fields(info)])


def fields(info: ConnectInfo) -> list[tuple[str, str]]:
    shown: list[tuple[str, str]] = []
    if info.adb is not None:
        shown.append(("ADB", f"adb connect {info.adb.ip}:{info.adb.port}"))
        shown.append(("ADB code", info.adb.code or "-"))
    if info.cdp is not None:
        shown.append(("CDP", info.cdp.ws or "-"))
        shown.append(("CDP http", info.cdp.http or "-"))
    if info.message:
        shown.append(("Connect", info.message))
    return shown


def config_path(given: Path | None) -> Path:
    """`--config`, else $DEVICEPOOL_CONFIG, else `devicepool dev`'s, else the worker's default."""
    from devicepool.worker.config import DEFAULT_CONFIG_FILE
    from devicepool.worker.config_values import ENV_CONFIG

    if given is not None:
        return given
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    if DEV_WORKER_CONFIG.is_file():
        return DEV_WORKER_CONFIG
    return Path(DEFAULT_CONFIG_FILE)


async def read_direct(
    client: Any, kind: Kind, name: str, device: str, config: Path | None
) -> ConnectInfo:
    """The device's connect info from its provider, with the worker config's account: no
    Temporal history at all. A profile's is its node worker's to read (its Local API)."""
    from devicepool.activities.errors import ProviderError
    from devicepool.activities.metrics import Metrics
    from devicepool.activities.providers.registry import build_provider
    from devicepool.api.v1beta1 import DevicePoolSpec
    from devicepool.worker.config import load_config

    shown = side_of(kind).shown(name)
    if kind.name == KIND_BROWSER_POOL:
        raise DevicePoolError(
            f"{shown}: a profile's CDP endpoint is read by its node worker, so only through"
            " encrypted history: give the workers `encryption.keyFiles` and this shell"
            " DEVICEPOOL_ENCRYPTION_KEY_FILES"
        )
    handle = client._client.get_workflow_handle(kind.workflow_id(name))
    answer = await client._try_query(handle, QUERY_SPEC)
    if not isinstance(answer, dict) or not isinstance(answer.get("spec"), dict):
        raise DevicePoolError(f"{shown}: its spec did not answer (is a worker running?)")
    account_name = DevicePoolSpec.model_validate(answer["spec"]).account
    path = config_path(config)
    worker = load_config(path)
    account = worker.accounts.get(account_name)
    if account is None:
        raise BadInput(
            f"{path}: no account {account_name!r} (the pool's): pass the config of a worker"
            " that serves it with --config"
        )
    if account.node:
        raise DevicePoolError(
            f"{shown}: account {account_name!r} is served by node worker {account.node!r}"
            " (its Local API and key are there): read it through encrypted history"
        )
    provider = build_provider(account, metrics=Metrics(), scrubber=worker.scrubber())
    try:
        return await provider.connect_info(device)
    except ProviderError as err:
        raise DevicePoolError(f"{shown}: connect info of {device}: {err}") from None
    finally:
        await provider.aclose()
