"""The worker's configuration: one YAML file plus environment overrides.

The file (``--config``, default ``devicepool.yaml``; see
``examples/devicepool.yaml``)::

    accounts:                      # provider accounts, by the name pools use
      default:                     #   in spec.providerCredentialRef
        baseUrl: https://api.bitcloudphone.example
        apiKeyFile: /run/secrets/bcp-default   # or apiKeyEnv: BCP_DEFAULT_KEY
        createsPerMinute: 20       # the account's creation window
        windowSeconds: 60          # its length (optional; shorter only for a sped-up emulator)
        windowMarginSeconds: 1     # added to each window against clock skew (optional)
        timeoutSeconds: 10         # per HTTP call (optional)
    proxyPools:                    # proxy gateways, by the name pools use in
      proxyseller-us:              #   spec.proxy.poolRef
        type: socks5
        host: gw.proxyseller.example
        port: 10000
        usernameTemplate: "user-session-{session}-ttl-{ttl}"
        passwordFile: /run/secrets/proxyseller   # or passwordEnv (optional)
    intervals:                     # all optional, in seconds
      resyncSeconds: 30
      healthSeconds: 60
      offlineAfterSeconds: 180
      startupTimeoutSeconds: 300
      idleGraceSeconds: 60
    metricsPort: 9464

Relative secret file paths are resolved against the config file's directory.
Environment overrides (each wins over the file):

    DEVICEPOOL_CONFIG                     the config file, when --config is not given
    DEVICEPOOL_RESYNC_SECONDS             intervals.resyncSeconds
    DEVICEPOOL_HEALTH_SECONDS             intervals.healthSeconds
    DEVICEPOOL_OFFLINE_AFTER_SECONDS      intervals.offlineAfterSeconds
    DEVICEPOOL_STARTUP_TIMEOUT_SECONDS    intervals.startupTimeoutSeconds
    DEVICEPOOL_IDLE_GRACE_SECONDS         intervals.idleGraceSeconds
    DEVICEPOOL_METRICS_PORT               metricsPort
    DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS  how long in-flight activities get at SIGTERM (default 20)
    DEVICEPOOL_LOG_FORMAT                 logfmt (default) or json

The Temporal connection is not configured here: it comes from the SDK's
standard ``TEMPORAL_*`` environment variables and profiles (see
``devicepool.connect``).

Every problem is a `ConfigError` whose `str()` is one line naming the file and
the field. Secrets are read into `SecretStr` and never appear in a message.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.alias_generators import to_camel

from devicepool.activities.models import AccountSettings, PoolSettings, ProxyPoolSettings

DEFAULT_CONFIG_FILE = "devicepool.yaml"
DEFAULT_METRICS_PORT = 9464
DEFAULT_GRACEFUL_SHUTDOWN_SECONDS = 20.0

ENV_CONFIG = "DEVICEPOOL_CONFIG"
ENV_METRICS_PORT = "DEVICEPOOL_METRICS_PORT"
ENV_GRACEFUL_SHUTDOWN = "DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS"
ENV_LOG_FORMAT = "DEVICEPOOL_LOG_FORMAT"
# environment variable -> intervals field (camelCase, as in the file)
ENV_INTERVALS: dict[str, str] = {
    "DEVICEPOOL_RESYNC_SECONDS": "resyncSeconds",
    "DEVICEPOOL_HEALTH_SECONDS": "healthSeconds",
    "DEVICEPOOL_OFFLINE_AFTER_SECONDS": "offlineAfterSeconds",
    "DEVICEPOOL_STARTUP_TIMEOUT_SECONDS": "startupTimeoutSeconds",
    "DEVICEPOOL_IDLE_GRACE_SECONDS": "idleGraceSeconds",
}


class ConfigError(ValueError):
    """A configuration problem; `str()` is one line naming the field."""


# ---------------------------------------------------------------- the file's schema


class _FileModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="forbid")


class AccountFile(_FileModel):
    base_url: str
    api_key_file: str | None = None
    api_key_env: str | None = None
    creates_per_minute: int = Field(default=20, ge=1, le=6000)
    timeout_seconds: float = Field(default=10.0, gt=0)
    window_seconds: float = Field(default=60.0, gt=0)
    window_margin_seconds: float = Field(default=1.0, ge=0)


class ProxyPoolFile(_FileModel):
    type: str = "socks5"
    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    username_template: str = "user-session-{session}-ttl-{ttl}"
    password_file: str | None = None
    password_env: str | None = None


class IntervalsFile(_FileModel):
    resync_seconds: float = Field(default=30.0, gt=0)
    health_seconds: float = Field(default=60.0, gt=0)
    offline_after_seconds: float = Field(default=180.0, gt=0)
    startup_timeout_seconds: float = Field(default=300.0, gt=0)
    idle_grace_seconds: float = Field(default=60.0, ge=0)
    # Failing replacements: stop creating in a region after this many devices in
    # a row never became ready, and back off from backoffInitialSeconds doubling
    # up to backoffMaxSeconds.
    failure_streak_limit: int = Field(default=3, ge=1)
    backoff_initial_seconds: float = Field(default=30.0, gt=0)
    backoff_max_seconds: float = Field(default=900.0, gt=0)


class ConfigFile(_FileModel):
    accounts: dict[str, AccountFile] = Field(default_factory=dict)
    proxy_pools: dict[str, ProxyPoolFile] = Field(default_factory=dict)
    intervals: IntervalsFile = Field(default_factory=IntervalsFile)
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)


# ---------------------------------------------------------------- the resolved configuration


@dataclass(frozen=True)
class WorkerConfig:
    """What the worker runs with: secrets resolved, overrides applied."""

    accounts: dict[str, AccountSettings]
    proxy_pools: dict[str, ProxyPoolSettings]
    settings: PoolSettings
    metrics_port: int = DEFAULT_METRICS_PORT
    graceful_shutdown_seconds: float = DEFAULT_GRACEFUL_SHUTDOWN_SECONDS
    log_format: str = "logfmt"
    source: str = field(default="<defaults>")

    def describe(self) -> dict[str, Any]:
        """A secret-free summary, for the start-up log line."""
        return {
            "config": self.source,
            "accounts": ",".join(
                f"{a.name}@{a.base_url}/{a.creates_per_minute}pm" for a in self.accounts.values()
            ),
            "proxy_pools": ",".join(sorted(self.proxy_pools)),
            "resync_seconds": self.settings.resync_seconds,
            "metrics_port": self.metrics_port,
        }


def config_path(explicit: str | Path | None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(explicit or env.get(ENV_CONFIG) or DEFAULT_CONFIG_FILE)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
) -> WorkerConfig:
    """Read, validate and resolve the worker configuration (raises `ConfigError`)."""
    env = os.environ if env is None else env
    file = config_path(path, env)
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
) -> WorkerConfig:
    env = os.environ if env is None else env
    base_dir = base_dir or Path.cwd()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping (accounts, proxyPools, intervals, ...)")
    data = _apply_env(dict(data), env, source)
    try:
        parsed = ConfigFile.model_validate(data)
    except pydantic.ValidationError as err:
        raise ConfigError(f"{source}: {_first_error(err)}") from None

    accounts: dict[str, AccountSettings] = {}
    for name, account in parsed.accounts.items():
        where = f"{source}: accounts.{name}"
        _check_url(account.base_url, f"{where}.baseUrl")
        key = _secret(
            file=account.api_key_file,
            env_name=account.api_key_env,
            field_prefix=f"{where}.apiKey",
            base_dir=base_dir,
            env=env,
            required=True,
        )
        accounts[name] = AccountSettings(
            name=name,
            base_url=account.base_url.rstrip("/"),
            api_key=key,
            creates_per_minute=account.creates_per_minute,
            timeout_seconds=account.timeout_seconds,
            window_seconds=account.window_seconds,
            window_margin_seconds=account.window_margin_seconds,
        )
    proxy_pools: dict[str, ProxyPoolSettings] = {}
    for name, pool in parsed.proxy_pools.items():
        where = f"{source}: proxyPools.{name}"
        _check_template(pool.username_template, f"{where}.usernameTemplate")
        password = _secret(
            file=pool.password_file,
            env_name=pool.password_env,
            field_prefix=f"{where}.password",
            base_dir=base_dir,
            env=env,
            required=False,
        )
        proxy_pools[name] = ProxyPoolSettings(
            name=name,
            type=pool.type,
            host=pool.host,
            port=pool.port,
            username_template=pool.username_template,
            password=password,
        )
    intervals = parsed.intervals
    settings = PoolSettings(
        resync_seconds=intervals.resync_seconds,
        health_seconds=intervals.health_seconds,
        offline_after_seconds=intervals.offline_after_seconds,
        startup_timeout_seconds=intervals.startup_timeout_seconds,
        idle_grace_seconds=intervals.idle_grace_seconds,
        failure_streak_limit=intervals.failure_streak_limit,
        backoff_initial_seconds=intervals.backoff_initial_seconds,
        backoff_max_seconds=intervals.backoff_max_seconds,
    )
    graceful = _env_float(env, ENV_GRACEFUL_SHUTDOWN, DEFAULT_GRACEFUL_SHUTDOWN_SECONDS, source)
    log_format = env.get(ENV_LOG_FORMAT, "logfmt").strip().lower() or "logfmt"
    if log_format not in ("logfmt", "json"):
        raise ConfigError(f"{ENV_LOG_FORMAT}: must be logfmt or json, got {log_format!r}")
    return WorkerConfig(
        accounts=accounts,
        proxy_pools=proxy_pools,
        settings=settings,
        metrics_port=parsed.metrics_port if metrics_port is None else metrics_port,
        graceful_shutdown_seconds=graceful,
        log_format=log_format,
        source=source,
    )


# ---------------------------------------------------------------- helpers


def _apply_env(data: dict[str, Any], env: Mapping[str, str], source: str) -> dict[str, Any]:
    intervals = data.get("intervals")
    intervals = dict(intervals) if isinstance(intervals, dict) else intervals
    for name, key in ENV_INTERVALS.items():
        if name in env:
            if intervals is None:
                intervals = {}
            if isinstance(intervals, dict):
                intervals[key] = _env_float(env, name, 0.0, source)
    if intervals is not None:
        data["intervals"] = intervals
    if ENV_METRICS_PORT in env:
        raw = env[ENV_METRICS_PORT]
        try:
            data["metricsPort"] = int(raw)
        except ValueError:
            raise ConfigError(f"{ENV_METRICS_PORT}: must be an integer, got {raw!r}") from None
    return data


def _env_float(env: Mapping[str, str], name: str, default: float, source: str) -> float:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"{name}: must be >= 0, got {raw!r}")
    return value


def _first_error(err: pydantic.ValidationError) -> str:
    """The first problem, as `field.path: message` with the file's camelCase names."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{loc}: unknown field"
    if first["type"] == "missing":
        return f"{loc}: required"
    message = first["msg"]
    value = first.get("input")
    shown = "" if isinstance(value, dict | list) else f", got {value!r}"
    extra = f" ({len(err.errors()) - 1} more problem(s))" if len(err.errors()) > 1 else ""
    return f"{loc}: {message[:1].lower()}{message[1:]}{shown}{extra}"


def _check_url(url: str, where: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{where}: must be an http(s) URL such as https://host[:port], got {url!r}"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"{where}: bad port in {url!r}") from None


def _check_template(template: str, where: str) -> None:
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    unknown = {f for f in fields if f not in ("session", "ttl")}
    if unknown or "" in fields:
        raise ConfigError(f"{where}: may use {{session}} and {{ttl}} only, got {template!r}")


def _secret(
    *,
    file: str | None,
    env_name: str | None,
    field_prefix: str,
    base_dir: Path,
    env: Mapping[str, str],
    required: bool,
) -> SecretStr:
    if file and env_name:
        raise ConfigError(
            f"{field_prefix}File / {field_prefix.rsplit('.', 1)[-1]}Env: set one, not both"
        )
    if file:
        path = Path(file).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        try:
            value = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise ConfigError(f"{field_prefix}File: file {str(path)!r} not found") from None
        except OSError as err:
            raise ConfigError(
                f"{field_prefix}File: cannot read {str(path)!r}: {err.strerror or err}"
            ) from None
        if not value:
            raise ConfigError(f"{field_prefix}File: file {str(path)!r} is empty")
        return SecretStr(value)
    if env_name:
        value = env.get(env_name, "").strip()
        if not value:
            raise ConfigError(
                f"{field_prefix}Env: environment variable {env_name} is not set or empty"
            )
        return SecretStr(value)
    if required:
        raise ConfigError(f"{field_prefix}File: required (or {field_prefix.rsplit('.', 1)[-1]}Env)")
    return SecretStr("")
