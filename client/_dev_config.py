"""What `devicepool dev` configures: its options, its accounts and keys, the worker's config file.

The worker config is written to ``<data-dir>/worker.yaml`` at every start, its API keys as files
under ``<data-dir>/secrets/``: the default account, every account a previous run or an applied
pool names, the example proxy pools and the interval flags; with `--geelark`, the account
`geelark` on the GeeLark emulator (its key in ``secrets/geelark.key``). With `--encrypt` the
stack gets a history key of its own (``secrets/encryption/dev.key``, made once, mode 0600); a
data dir once encrypted stays so, flag or not (docs/operations.md, 'Encrypted history')."""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from devicepool.api.names import KIND_DEVICE_POOL
from devicepool.client.errors import DevicePoolError
from devicepool.codec import EXTRA_HINT

DEV_NAMESPACE = "default"
DEV_HOST = "127.0.0.1"
# The Temporal worker deployment the dev worker is a version of (Worker Versioning).
DEV_DEPLOYMENT = "devicepool"
DEFAULT_ACCOUNT = "default"
# The dev proxy pools' password file (relative to the config) and its placeholder.
PROXY_PASSWORD_FILE = "secrets/proxy.password"
DEV_PROXY_PASSWORD = "devicepool-dev-proxy"
DEFAULT_API_KEY = "devicepool-dev-key"
# Proxy pools the examples and the article name. The emulator routes no traffic,
# so the gateways are placeholders (`.invalid` never resolves).
DEV_PROXY_POOLS = ("proxyseller-us", "proxyseller-eu", "proxyseller-asia")
# `--browser-nodes N`: the BitBrowser account the nodes node-1..N are logged into,
# and the node whose worker serves its cloud phones.
BITBROWSER_ACCOUNT = "bitbrowser"
BITBROWSER_PHONES_NODE = "node-1"
MAX_BROWSER_NODES = 20
# `--browser-nodes N`: node-K's node worker is the child (and log) `node-K-worker`.
NODE_WORKER_SUFFIX = "-worker"
# `--encrypt`: the id of the stack's history key.
KEY_ID = "dev"
# `--geelark`: the account on the GeeLark emulator, the emulator's port unless the flag or a
# previous run says another, and its key file (the emulator's default key: none of ours).
GEELARK_ACCOUNT = "geelark"
DEFAULT_GEELARK_PORT = 8090
GEELARK_KEY_FILE = f"secrets/{GEELARK_ACCOUNT}.key"


@dataclass
class DevOptions:
    port: int = 7233
    ui_port: int = 8233
    emulator_port: int = 8088
    metrics_port: int = 9464
    data_dir: Path = Path(".devicepool")
    provision_seconds: float = 45.0
    terminate_seconds: float = 5.0
    creates_per_minute: int = 20
    resync_seconds: float = 30.0
    health_seconds: float = 60.0
    offline_after_seconds: float = 180.0
    startup_timeout_seconds: float = 300.0
    orphan_grace_seconds: float = 600.0
    node_lost_after_seconds: float = 120.0
    apply: str | None = None
    # Encrypted history and the codec server for the Web UI (`dev_key_file`).
    encrypt: bool = False
    codec_port: int = 8234
    # BitBrowser emulator nodes node-1..N of one account, on free ports (0: none).
    browser_nodes: int = 0
    # The GeeLark emulator and the account `geelark` on it; its port (None: `geelark_port`).
    geelark: bool = False
    geelark_port: int | None = None

    @property
    def address(self) -> str:
        return f"{DEV_HOST}:{self.port}"


def emulator_state_file(options: DevOptions) -> Path:
    """The emulator's SQLite state (devices, idempotency keys, rate window, billing)."""
    return options.data_dir / "emulator.sqlite"


def bitbrowser_state_file(options: DevOptions) -> Path:
    """The BitBrowser account (profiles, phones, counters) its nodes share and a restart keeps."""
    return options.data_dir / "bitbrowser.json"


def node_ports_file(options: DevOptions) -> Path:
    """`{"node-1": PORT, ...}`: the port each BitBrowser node took, asked for again at a restart
    so that its address (the docs' `curl` lines, a node worker's `--bitbrowser-url`) holds."""
    return options.data_dir / "bitbrowser-ports.json"


def saved_node_ports(options: DevOptions) -> dict[str, int]:
    """The ports a previous run's nodes took; none from a missing or damaged file."""
    try:
        saved = json.loads(node_ports_file(options).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(saved, dict):
        return {}
    return {
        name: port
        for name, port in saved.items()
        if isinstance(name, str) and type(port) is int and 0 < port < 65536
    }


def save_node_ports(options: DevOptions, urls: dict[str, str]) -> None:
    """Keep each node's port (`http://127.0.0.1:PORT`), and those of nodes not started this
    time (a later `--browser-nodes` larger again gets them back)."""
    ports = saved_node_ports(options)
    for name, url in urls.items():
        with contextlib.suppress(ValueError):
            port = urlsplit(url).port
            if port:
                ports[name] = port
    node_ports_file(options).write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")


def geelark_state_file(options: DevOptions) -> Path:
    """The GeeLark team (phones, quotas, locks, bills, clock) a restart keeps."""
    return options.data_dir / "geelark.json"


def geelark_port_file(options: DevOptions) -> Path:
    """`{"port": PORT}`: the port the GeeLark emulator took, its port at the next start unless
    `--geelark-port` says another (the worker's `baseUrl` and the user's `curl` lines hold)."""
    return options.data_dir / "geelark-port.json"


def geelark_port(options: DevOptions) -> int:
    """`--geelark-port`, else the previous run's (kept in the data dir), else 8090."""
    if options.geelark_port is not None:
        return options.geelark_port
    try:
        saved = json.loads(geelark_port_file(options).read_text())
    except (OSError, ValueError):
        return DEFAULT_GEELARK_PORT
    port = saved.get("port") if isinstance(saved, dict) else None
    return port if type(port) is int and 0 < port < 65536 else DEFAULT_GEELARK_PORT


def save_geelark_port(options: DevOptions, port: int) -> None:
    geelark_port_file(options).write_text(json.dumps({"port": port}) + "\n")


def geelark_address(port: int) -> str:
    return f"http://{DEV_HOST}:{port}"


def dev_key_file(options: DevOptions) -> Path:
    return options.data_dir / "secrets" / "encryption" / f"{KEY_ID}.key"


def encryption_on(options: DevOptions) -> bool:
    """`--encrypt`, or a data dir that an earlier `--encrypt` run left a key in."""
    return options.encrypt or dev_key_file(options).is_file()


def check_encryption_installed(options: DevOptions) -> None:
    """With encryption on, `DevicePoolError` naming the extra to install when `cryptography` is
    missing: said before anything starts (or a key is made), not by a codec server dying."""
    if not encryption_on(options):
        return
    try:
        importlib.import_module("cryptography.hazmat.primitives.ciphers.aead")
    except ImportError:
        needs = (
            "--encrypt needs"
            if options.encrypt
            else f"{options.data_dir} holds encrypted history (an earlier --encrypt) and needs"
        )
        raise DevicePoolError(
            f"{needs} the `cryptography` package, which is not installed: {EXTRA_HINT}"
        ) from None


def ensure_dev_key(options: DevOptions) -> Path:
    """The stack's key file, made on first use (32 random bytes, base64, readable by the owner)."""
    path = dev_key_file(options)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(base64.b64encode(os.urandom(32)).decode() + "\n")
    return path


def browser_node_names(options: DevOptions) -> list[str]:
    return [f"node-{i}" for i in range(1, options.browser_nodes + 1)]


def node_worker_name(node: str) -> str:
    """The dev stack's child (and log) name of node `node`'s worker: `node-1-worker`."""
    return f"{node}{NODE_WORKER_SUFFIX}"


def is_node_worker(child_name: str) -> bool:
    return child_name.endswith(NODE_WORKER_SUFFIX)


def node_config_file(options: DevOptions) -> Path:
    """The node workers' config: the dev proxy pools and the cloud-phone account (node-1's)."""
    return options.data_dir / "node.yaml"


def write_node_config(
    options: DevOptions, proxy_pools: Sequence[str], *, key_files: Sequence[str] = ()
) -> Path:
    """The dev proxy pools, the account `bitbrowser` (served by node-1; the other nodes
    pass it by) and with `--encrypt` the history key (activity inputs are encrypted)."""
    config = dev_worker_config(
        options,
        accounts=[],
        proxy_pools=proxy_pools,
        key_files=key_files,
        bitbrowser_node=BITBROWSER_PHONES_NODE,
    )
    node_config = {k: config[k] for k in ("accounts", "proxyPools", "encryption") if k in config}
    write_proxy_password(options.data_dir)
    path = node_config_file(options)
    header = "# Written by `devicepool dev --browser-nodes N` at every start (node workers).\n"
    path.write_text(header + yaml.safe_dump(node_config, sort_keys=False))
    return path


def write_proxy_password(data_dir: Path) -> Path:
    """The dev proxy pools' placeholder password (`secrets/proxy.password`): the gateways
    route nothing, but a cloud phone's proxy is refused without one."""
    path = data_dir / PROXY_PASSWORD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEV_PROXY_PASSWORD + "\n")
    path.chmod(0o600)
    return path


def account_key(account: str) -> str:
    return DEFAULT_API_KEY if account == DEFAULT_ACCOUNT else f"{DEFAULT_API_KEY}-{account}"


def dev_worker_config(
    options: DevOptions,
    *,
    accounts: Sequence[str],
    proxy_pools: Sequence[str],
    key_files: Sequence[str] = (),
    bitbrowser_node: str | None = None,
    geelark_url: str | None = None,
) -> dict[str, Any]:
    """The worker config `devicepool dev` writes (keys are files under `secrets/`).

    `bitbrowser_node` (`--browser-nodes`): the node whose worker serves the account
    `bitbrowser` (`api: bitbrowser`: cloud phones) over its Local API. `geelark_url`
    (`--geelark`): the GeeLark emulator the account `geelark` (`api: geelark`) signs its
    calls to, in key mode."""
    config: dict[str, Any] = {
        "accounts": {
            name: {
                "baseUrl": f"http://{DEV_HOST}:{options.emulator_port}",
                "apiKeyFile": f"secrets/{name}.key",
                "createsPerMinute": options.creates_per_minute,
            }
            for name in accounts
        },
        "proxyPools": {
            name: {
                "type": "socks5",
                "host": f"{name}.gateway.invalid",
                "port": 10000,
                "usernameTemplate": "user-session-{session}-ttl-{ttl}",
                # A cloud phone's proxy needs a password (the Local API requires one).
                "passwordFile": PROXY_PASSWORD_FILE,
            }
            for name in proxy_pools
        },
        "intervals": {
            "resyncSeconds": options.resync_seconds,
            "healthSeconds": options.health_seconds,
            "offlineAfterSeconds": options.offline_after_seconds,
            "startupTimeoutSeconds": options.startup_timeout_seconds,
            "orphanGraceSeconds": options.orphan_grace_seconds,
            "nodeLostAfterSeconds": options.node_lost_after_seconds,
        },
        "metricsPort": options.metrics_port,
        # Versioned, and promoted at every start (`--promote`): one process and no
        # older build beside it, so workflows follow the current build (an edited
        # workflow module is a new build).
        "deployment": {"name": DEV_DEPLOYMENT, "behavior": "autoUpgrade"},
    }
    if bitbrowser_node:
        # No URL and no key here: the node worker has both (its flags).
        config["accounts"][BITBROWSER_ACCOUNT] = {"api": "bitbrowser", "node": bitbrowser_node}
    if geelark_url:
        from devicepool.emulator.geelark.config import DEFAULT_APP_ID, GeeLarkConfig

        config["accounts"][GEELARK_ACCOUNT] = {
            "api": "geelark",
            "baseUrl": geelark_url,
            "appId": DEFAULT_APP_ID,
            "apiKeyFile": GEELARK_KEY_FILE,
            "createsPerMinute": options.creates_per_minute,
            # What the emulator bills: per running minute, to a daily cap a phone.
            "billing": {
                "perMinute": GeeLarkConfig.price_per_minute,
                "dailyCap": GeeLarkConfig.daily_cap,
            },
        }
    if key_files:  # `--encrypt`
        config["encryption"] = {"keyFiles": list(key_files)}
    return config


def write_worker_config(
    options: DevOptions,
    pools: Sequence[Any],
    *,
    key_files: Sequence[str] = (),
    bitbrowser_node: str | None = None,
    geelark_url: str | None = None,
) -> tuple[list[str], list[str]]:
    """Accounts and proxy pools: the defaults, the previous run's, and what pools name; with
    `bitbrowser_node`, the account `bitbrowser` served by that node; with `geelark_url`, the
    account `geelark` on that GeeLark emulator, its key written to `secrets/geelark.key`.
    The REST accounts are answered (the emulator's), `bitbrowser` and `geelark` never among
    them."""
    data_dir = options.data_dir
    accounts = {DEFAULT_ACCOUNT}
    proxy_pools = set(DEV_PROXY_POOLS)
    previous = data_dir / "worker.yaml"
    if previous.is_file():
        with contextlib.suppress(yaml.YAMLError, OSError, AttributeError):
            old = yaml.safe_load(previous.read_text()) or {}
            accounts.update(old.get("accounts") or {})
            proxy_pools.update(old.get("proxyPools") or {})
    for pool in pools:
        if pool.kind == KIND_DEVICE_POOL:  # a BrowserPool's account is its nodes'
            accounts.add(pool.spec.account)
        if pool.spec.proxy is not None:
            proxy_pools.add(pool.spec.proxy.pool_ref)
    accounts.discard(BITBROWSER_ACCOUNT)  # the Local API's, only with its nodes
    accounts.discard(GEELARK_ACCOUNT)  # the GeeLark emulator's, only with `--geelark`
    secrets = write_proxy_password(data_dir).parent
    keys = {account: account_key(account) for account in accounts}
    if geelark_url:
        from devicepool.emulator.geelark.config import DEFAULT_API_KEY as GEELARK_KEY

        keys[GEELARK_ACCOUNT] = GEELARK_KEY
    for account, key in keys.items():
        key_file = secrets / f"{account}.key"
        # Made readable by the owner alone (never for a moment by the umask's mode).
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
        key_file.chmod(0o600)  # one an older run made
    config = dev_worker_config(
        options,
        accounts=sorted(accounts),
        proxy_pools=sorted(proxy_pools),
        key_files=key_files,
        bitbrowser_node=bitbrowser_node,
        geelark_url=geelark_url,
    )
    header = "# Written by `devicepool dev` at every start; edit its flags, not this file.\n"
    previous.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return sorted(accounts), sorted(proxy_pools)


def server_env() -> dict[str, str]:
    """The Temporal dev server's environment: the shell's, without `OTEL_*`.

    The server reads the OpenTelemetry environment too and refuses what it cannot export
    (`OTEL_TRACES_EXPORTER=console` stops it at start). The shell's `OTEL_*` are meant for the
    dev worker, which keeps them (`worker_env`; docs/operations.md, 'Tracing').
    """
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def worker_env(options: DevOptions) -> dict[str, str]:
    """The dev worker's environment: this stack's server, whatever the user's shell points at.

    The flags, not stray DEVICEPOOL_* overrides, set the intervals.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TEMPORAL_") and not k.startswith("DEVICEPOOL_")
    }
    env.update(
        TEMPORAL_ADDRESS=options.address,
        TEMPORAL_NAMESPACE=DEV_NAMESPACE,
        DEVICEPOOL_METRICS_HOST=DEV_HOST,
        PYTHONUNBUFFERED="1",
    )
    return env
