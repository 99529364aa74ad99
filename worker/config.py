"""The worker's configuration: one YAML file plus `DEVICEPOOL_*` environment overrides.

`build_config` / `load_config` give a `WorkerConfig`; relative secret file paths resolve against
the config file's directory. Every problem is a `ConfigError` whose `str()` is one line naming
the file and the field; secrets are `SecretStr`, never in a message. The schema is
``config_file.py``, the environment, secret and field checks ``config_values.py``. Reference:
``examples/worker/devicepool.yaml``; docs/operations.md, 'The worker and its configuration'."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import SecretStr
from temporalio.converter import PayloadCodec

from devicepool.activities.definitions import CREATE_START_TO_CLOSE_TIMEOUT
from devicepool.activities.models import AccountSettings, PoolSettings, ProxyPoolSettings
from devicepool.activities.providers.base import PROVIDER_APIS
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import Billing
from devicepool.api.labels import check_node_name
from devicepool.api.v1beta1 import SpendCapSpec
from devicepool.codec import (
    ENV_KEY_FILES,
    EncryptedPayloadGuard,
    EncryptionCodec,
    EncryptionKeyError,
    KeyRing,
    key_files_from_env,
)
from devicepool.worker.config_file import (
    DEFAULT_METRICS_PORT,
    DEFAULT_ORPHAN_GRACE_SECONDS,
    AccountFile,
    ConfigFile,
    SpendCapFile,
    WorkerCapacity,
    first_error,
)
from devicepool.worker.config_values import (
    ENV_CONFIG,
    ENV_GRACEFUL_SHUTDOWN,
    ConfigError,
    apply_env,
    check_template,
    check_url,
    env_float,
    log_format,
    read_secret,
)
from devicepool.worker.versioning import default_build_id

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_GRACEFUL_SHUTDOWN_SECONDS",
    "DEFAULT_METRICS_PORT",
    "ConfigError",
    "WorkerCapacity",
    "WorkerConfig",
    "build_config",
    "load_config",
]

DEFAULT_CONFIG_FILE = "devicepool.yaml"
DEFAULT_GRACEFUL_SHUTDOWN_SECONDS = 20.0


@dataclass(frozen=True)
class WorkerConfig:
    """What the worker runs with: secrets resolved, overrides applied."""

    accounts: dict[str, AccountSettings]
    proxy_pools: dict[str, ProxyPoolSettings]
    settings: PoolSettings
    metrics_port: int = DEFAULT_METRICS_PORT
    graceful_shutdown_seconds: float = DEFAULT_GRACEFUL_SHUTDOWN_SECONDS
    log_format: str = "logfmt"
    capacity: WorkerCapacity = field(default_factory=WorkerCapacity)
    source: str = field(default="<defaults>")
    # The per-account orphan sweep's grace (intervals.orphanGraceSeconds).
    orphan_grace_seconds: float = DEFAULT_ORPHAN_GRACE_SECONDS
    # Worker Versioning (`worker/versioning.py`): a deployment name makes the
    # workflow worker a version of it; "" runs unversioned.
    deployment_name: str = ""
    build_id: str = ""
    pinned: bool = True
    # Encrypted history (`encryption.keyFiles`, DEVICEPOOL_ENCRYPTION_KEY_FILES): the keys
    # read at load time, so a bad key file stops the worker before it connects.
    encryption_keys: KeyRing | None = None

    def codec(self) -> PayloadCodec:
        """The payload codec the worker's client uses (`devicepool.codec`)."""
        if self.encryption_keys is None:
            return EncryptedPayloadGuard()
        return EncryptionCodec(self.encryption_keys)

    def scrubber(self) -> Scrubber:
        """Every secret this worker holds (API keys, proxy passwords), for its provider clients."""
        return Scrubber.of(accounts=self.accounts.values(), proxy_pools=self.proxy_pools.values())

    def describe(self) -> dict[str, Any]:
        """A secret-free summary, for the start-up log line."""
        return {
            "config": self.source,
            "accounts": ",".join(
                f"{a.name}@{f'node:{a.node}' if a.node else a.base_url}/{a.creates_per_minute}pm"
                for a in self.accounts.values()
            ),
            "proxy_pools": ",".join(sorted(self.proxy_pools)),
            "resync_seconds": self.settings.resync_seconds,
            "orphan_grace_seconds": self.orphan_grace_seconds,
            "metrics_port": self.metrics_port,
            "max_concurrent_activities": self.capacity.max_concurrent_activities,
            "max_concurrent_watches": self.capacity.max_concurrent_watches,
            "max_cached_workflows": self.capacity.max_cached_workflows,
            "deployment": f"{self.deployment_name}:{self.build_id}" if self.deployment_name else "",
            # Key ids only (never key material): the encrypting key, then the others.
            "encryption": ",".join(self.encryption_keys.key_ids) if self.encryption_keys else "off",
        }


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
) -> WorkerConfig:
    """Read, validate and resolve the worker configuration (raises `ConfigError`)."""
    env = os.environ if env is None else env
    file = Path(path or env.get(ENV_CONFIG) or DEFAULT_CONFIG_FILE)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file}: config file not found (pass --config FILE)") from None
    except OSError as err:
        raise ConfigError(f"{file}: cannot read: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ConfigError(f"{file}: {where}{problem}") from None
    return build_config(
        data if data is not None else {},
        source=str(file),
        base_dir=file.parent,
        env=env,
        metrics_port=metrics_port,
    )


def build_config(
    data: Any,
    *,
    source: str = "<config>",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
    serving_node: str = "",
) -> WorkerConfig:
    """Validate and resolve an already-parsed config file (raises `ConfigError`).

    `serving_node`: the node worker reading it (`worker/node.py`); its `api: geelark`
    accounts are resolved to be spoken to here (their key read), not routed to it."""
    env = os.environ if env is None else env
    base_dir = base_dir or Path.cwd()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping (accounts, proxyPools, intervals, ...)")
    data = apply_env(dict(data), env, source)
    try:
        parsed = ConfigFile.model_validate(data)
    except pydantic.ValidationError as err:
        raise ConfigError(f"{source}: {first_error(err)}") from None
    accounts = _accounts(
        parsed, source=source, base_dir=base_dir, env=env, serving_node=serving_node
    )
    proxy_pools = _proxy_pools(parsed, source=source, base_dir=base_dir, env=env)
    encryption_keys = _encryption_keys(parsed, source=source, base_dir=base_dir, env=env)
    settings = PoolSettings(
        **parsed.intervals.model_dump(exclude={"orphan_grace_seconds"}),
        account_prices={name: a.price_per_hour for name, a in accounts.items()},
        account_billing={
            name: a.billing for name, a in accounts.items() if a.billing.model != "hourly"
        },
        account_nodes={name: a.node for name, a in accounts.items() if a.node},
        phone_accounts=sorted(name for name, a in accounts.items() if a.api == "bitbrowser"),
        # The pools answer connect info only through encrypted history (`lease_connect`).
        history_encrypted=encryption_keys is not None,
    )
    graceful = env_float(env, ENV_GRACEFUL_SHUTDOWN, DEFAULT_GRACEFUL_SHUTDOWN_SECONDS, source)
    return WorkerConfig(
        accounts=accounts,
        proxy_pools=proxy_pools,
        settings=settings,
        metrics_port=parsed.metrics_port if metrics_port is None else metrics_port,
        graceful_shutdown_seconds=graceful,
        log_format=log_format(env),
        capacity=WorkerCapacity(**parsed.capacity.model_dump()),
        source=source,
        orphan_grace_seconds=parsed.intervals.orphan_grace_seconds,
        deployment_name=parsed.deployment.name,
        build_id=(parsed.deployment.build_id or default_build_id())
        if parsed.deployment.name
        else "",
        pinned=parsed.deployment.behavior == "pinned",
        encryption_keys=encryption_keys,
    )


def _encryption_keys(
    parsed: ConfigFile, *, source: str, base_dir: Path, env: Mapping[str, str]
) -> KeyRing | None:
    """The key ring: DEVICEPOOL_ENCRYPTION_KEY_FILES over `encryption.keyFiles`; None when off."""
    if key_files_from_env(env):  # set and not empty: it wins over the file
        files, where = [Path(f) for f in key_files_from_env(env)], ENV_KEY_FILES
    else:
        files = [base_dir / f for f in parsed.encryption.key_files]
        where = f"{source}: encryption.keyFiles"
    if not files:
        return None
    try:
        keys = KeyRing.from_files(files)
        EncryptionCodec(keys)  # the `cryptography` package is there
    except EncryptionKeyError as err:
        raise ConfigError(f"{where}: {err}") from None
    return keys


# The file's account fields that are not `AccountSettings` fields as they are (resolved here).
_NOT_SETTINGS = {
    "node",
    "base_url",
    "api_key_file",
    "api_key_env",
    "spend_cap",
    "app_id",
    "price_per_hour",
    "billing",
}
# `api: geelark` without `baseUrl`: the vendor's Open API.
GEELARK_BASE_URL = "https://openapi.geelark.com"


def _accounts(
    parsed: ConfigFile,
    *,
    source: str,
    base_dir: Path,
    env: Mapping[str, str],
    serving_node: str = "",
) -> dict[str, AccountSettings]:
    accounts: dict[str, AccountSettings] = {}
    for name, account in parsed.accounts.items():
        where = f"{source}: accounts.{name}"
        if account.api not in PROVIDER_APIS:
            raise ConfigError(
                f"{where}.api: unknown provider API {account.api!r} "
                f"(known: {', '.join(PROVIDER_APIS)})"
            )
        app_id = _app_id(account, where)
        if account.api == "geelark" and account.base_url is None:
            account = account.model_copy(update={"base_url": GEELARK_BASE_URL})
        node = _account_node(account, where)
        _check_timeout(account.timeout_seconds, f"{where}.timeoutSeconds")
        base_url, key = "", SecretStr("")
        node_served = bool(node) and account.api == "geelark" and node == serving_node
        if node_served:
            # This process is the account's node worker: it speaks to GeeLark itself.
            node = ""
        if not node:
            # Checked as `_account_node` left it: present.
            base_url = str(account.base_url)
            check_url(base_url, f"{where}.baseUrl")
            key = read_secret(
                file=account.api_key_file,
                env_name=account.api_key_env,
                field_prefix=f"{where}.apiKey",
                base_dir=base_dir,
                env=env,
                required=True,
            )
        accounts[name] = AccountSettings(
            **account.model_dump(exclude=_NOT_SETTINGS),
            name=name,
            node=node,
            node_served=node_served,
            base_url=base_url.rstrip("/"),
            api_key=key,
            app_id=app_id,
            spend_cap=_spend_cap(account.spend_cap),
            **_billing(account, where),
        )
    return accounts


def _billing(account: AccountFile, where: str) -> dict[str, Any]:
    """`price_per_hour` and `billing` of the account's settings: `pricePerHour` by the hour,
    else its `billing`'s price of an hour running."""
    given = account.billing
    if given is None:
        return {"price_per_hour": account.price_per_hour, "billing": Billing()}
    if account.api != "geelark":
        # Per running minute reads `offline` as shut down, which only GeeLark's statuses
        # promise (a Local API phone offline may be on and billing): refused, not undercounted.
        raise ConfigError(
            f"{where}.billing: only for api: geelark (this one is api: {account.api}; "
            "give pricePerHour)"
        )
    if "price_per_hour" in account.model_fields_set:
        raise ConfigError(f"{where}.pricePerHour: not with billing (billing prices the account)")
    if given.monthly is not None:
        # GeeLark charges a monthly phone its month when it is rented, and a pool deletes and
        # adds phones (heal, rollout, reset, autoscale): each replacement buys a month that
        # no price an hour counts, so neither `devicepool cost` nor a spend cap could hold it.
        raise ConfigError(
            f"{where}.billing.monthly: refused: every phone a pool replaces would rent another "
            "month that no cost or spend cap counts; give perMinute (and dailyCap), or rent "
            "monthly phones by hand outside devicepool"
        )
    if given.per_minute is None:
        raise ConfigError(f"{where}.billing: give perMinute (dollars a running minute)")
    billing = Billing(model="perMinute", daily_cap=given.daily_cap)
    return {"price_per_hour": given.per_minute * 60, "billing": billing}


def _app_id(account: AccountFile, where: str) -> str:
    """`appId`: `api: geelark` only, where it selects key mode (the key file holds the API
    key; without it, the client app's token)."""
    if account.app_id is None:
        return ""
    if account.api != "geelark":
        raise ConfigError(f"{where}.appId: only for api: geelark (this one is api: {account.api})")
    app_id = account.app_id.strip()
    if not app_id or len(app_id) > 200 or not app_id.isprintable() or " " in app_id:
        raise ConfigError(f"{where}.appId: must be GeeLark's app id (no spaces), got {app_id!r}")
    return app_id


def _account_node(account: AccountFile, where: str) -> str:
    """The account's node worker ("" when this process speaks to `baseUrl` itself).

    Required for `api: bitbrowser`, in place of `baseUrl` and the key: one process paces
    the Local API and holds the reserve claim lock, however many main replicas run. Allowed
    for `api: geelark`: the node worker, one process, keeps the key's pacer, breaker and
    create lock (docs/providers.md, 'One process serves a GeeLark account'); its key fields
    are read by the node only. Not for `api: rest` (its ledger shares its limits).
    """
    if account.node is None:
        if account.api == "bitbrowser":
            raise ConfigError(
                f"{where}.node: required for api: bitbrowser (the Local API allows 1 request "
                "a second and a reserve profile must be claimed once: one node worker, "
                "`devicepool worker --node NAME --bitbrowser-url URL`, serves the account, "
                "not each main worker)"
            )
        if account.base_url is None:
            raise ConfigError(f"{where}.baseUrl: required")
        return ""
    if account.api not in ("bitbrowser", "geelark"):
        raise ConfigError(
            f"{where}.node: only an api: bitbrowser or api: geelark account is served by a "
            f"node worker (this one is api: {account.api}); use baseUrl"
        )
    try:
        check_node_name(account.node)
    except ValueError as err:
        raise ConfigError(f"{where}.node: {err}") from None
    if account.api == "geelark":
        if account.api_key_file is None and account.api_key_env is None:
            raise ConfigError(
                f"{where}.apiKeyFile: required with node (the node worker reads the key "
                "from it, or apiKeyEnv; main workers never do)"
            )
        check_url(str(account.base_url), f"{where}.baseUrl")
        return account.node
    for value, field_name in (
        (account.base_url, "baseUrl"),
        (account.api_key_file, "apiKeyFile"),
        (account.api_key_env, "apiKeyEnv"),
    ):
        if value is not None:
            raise ConfigError(
                f"{where}.{field_name}: not with node (the node worker's --bitbrowser-url "
                "and --bitbrowser-key-file reach its Local API); give one of node and baseUrl"
            )
    return account.node


def _spend_cap(cap: SpendCapFile | None) -> SpendCapSpec | None:
    """The account's cap; one that limits nothing (both unset) is no cap."""
    if cap is None or (cap.max_devices is None and cap.max_hourly_cost is None):
        return None
    return SpendCapSpec(max_devices=cap.max_devices, max_hourly_cost=cap.max_hourly_cost)


def _check_timeout(seconds: float, where: str) -> None:
    """A call that may take longer than a create attempt may run would fail every attempt."""
    limit = CREATE_START_TO_CLOSE_TIMEOUT.total_seconds()
    if seconds >= limit:
        raise ConfigError(
            f"{where}: must be below {limit:g} (seconds; the create activity's "
            f"start-to-close timeout), got {seconds:g}"
        )


def _proxy_pools(
    parsed: ConfigFile, *, source: str, base_dir: Path, env: Mapping[str, str]
) -> dict[str, ProxyPoolSettings]:
    proxy_pools: dict[str, ProxyPoolSettings] = {}
    for name, pool in parsed.proxy_pools.items():
        where = f"{source}: proxyPools.{name}"
        check_template(pool.username_template, f"{where}.usernameTemplate")
        password = read_secret(
            file=pool.password_file,
            env_name=pool.password_env,
            field_prefix=f"{where}.password",
            base_dir=base_dir,
            env=env,
            required=False,
        )
        proxy_pools[name] = ProxyPoolSettings(
            **pool.model_dump(exclude={"password_file", "password_env"}),
            name=name,
            password=password,
        )
    return proxy_pools


def with_deployment(
    config: WorkerConfig, *, name: str | None = None, build_id: str | None = None
) -> WorkerConfig:
    """`config` with the command line's deployment name and build id over the file's."""
    if name is not None and "." in name:
        raise ConfigError(f"--deployment-name: must not contain a dot, got {name!r}")
    name = config.deployment_name if name is None else name
    build_id = build_id or (config.build_id if name == config.deployment_name else "")
    return dataclasses.replace(
        config, deployment_name=name, build_id=(build_id or default_build_id()) if name else ""
    )
