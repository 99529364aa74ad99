"""Checked values for the worker config: environment overrides, URLs, templates, secrets.

Every problem is a `ConfigError`, one line naming the field (``accounts.default.baseUrl``) or the
environment variable. Secrets are read into `SecretStr` and never appear in a message."""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretStr

ENV_CONFIG = "DEVICEPOOL_CONFIG"
ENV_METRICS_PORT = "DEVICEPOOL_METRICS_PORT"
ENV_GRACEFUL_SHUTDOWN = "DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS"
ENV_LOG_FORMAT = "DEVICEPOOL_LOG_FORMAT"
# Worker Versioning (`deployment.name`, `deployment.buildId`).
ENV_DEPLOYMENT: dict[str, str] = {
    "DEVICEPOOL_DEPLOYMENT_NAME": "name",
    "DEVICEPOOL_BUILD_ID": "buildId",
}
# environment variable -> intervals field (camelCase, as in the file)
ENV_INTERVALS: dict[str, str] = {
    "DEVICEPOOL_RESYNC_SECONDS": "resyncSeconds",
    "DEVICEPOOL_HEALTH_SECONDS": "healthSeconds",
    "DEVICEPOOL_OFFLINE_AFTER_SECONDS": "offlineAfterSeconds",
    "DEVICEPOOL_STARTUP_TIMEOUT_SECONDS": "startupTimeoutSeconds",
    "DEVICEPOOL_IDLE_GRACE_SECONDS": "idleGraceSeconds",
    "DEVICEPOOL_ORPHAN_GRACE_SECONDS": "orphanGraceSeconds",
}
# environment variable -> capacity field (camelCase, as in the file)
ENV_CAPACITY: dict[str, str] = {
    "DEVICEPOOL_MAX_CONCURRENT_ACTIVITIES": "maxConcurrentActivities",
    "DEVICEPOOL_MAX_CONCURRENT_WATCHES": "maxConcurrentWatches",
    "DEVICEPOOL_MAX_CACHED_WORKFLOWS": "maxCachedWorkflows",
}


_N = TypeVar("_N", int, float)


class ConfigError(ValueError):
    """A configuration problem; `str()` is one line naming the field."""


def apply_env(data: dict[str, Any], env: Mapping[str, str], source: str) -> dict[str, Any]:
    _override(data, "intervals", ENV_INTERVALS, env, lambda n: env_float(env, n, 0.0, source))
    _override(data, "capacity", ENV_CAPACITY, env, lambda n: env_count(env, n))
    _override(data, "deployment", ENV_DEPLOYMENT, env, lambda n: env[n].strip())
    if ENV_METRICS_PORT in env:
        raw = env[ENV_METRICS_PORT]
        try:
            data["metricsPort"] = int(raw)
        except ValueError:
            raise ConfigError(f"{ENV_METRICS_PORT}: must be an integer, got {raw!r}") from None
    return data


def _override(
    data: dict[str, Any],
    section: str,
    names: Mapping[str, str],
    env: Mapping[str, str],
    read: Callable[[str], Any],
) -> None:
    """Set `data[section][field]` from each environment variable of `names` that is set.

    A section that is not a mapping is left as it is, for the schema to report.
    """
    values = data.get(section)
    if values is None or isinstance(values, dict):
        given = {key: read(name) for name, key in names.items() if name in env}
        if given:
            data[section] = {**(values or {}), **given}


def env_float(env: Mapping[str, str], name: str, default: float, source: str) -> float:
    raw = env.get(name)
    return default if raw is None else _number(name, raw, float, 0, "a number of seconds")


def env_count(env: Mapping[str, str], name: str) -> int:
    """A positive whole number from the environment (slots, cache entries)."""
    return _number(name, env[name], int, 1, "a whole number")


def _number(name: str, raw: str, parse: Callable[[str], _N], least: int, what: str) -> _N:
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name}: must be {what}, got {raw!r}") from None
    if not math.isfinite(value):  # "inf" and "nan" parse as floats
        raise ConfigError(f"{name}: must be {what}, got {raw!r}")
    if value < least:
        raise ConfigError(f"{name}: must be >= {least}, got {raw!r}")
    return value


def log_format(env: Mapping[str, str]) -> str:
    """`DEVICEPOOL_LOG_FORMAT`: logfmt (the default) or json."""
    value = env.get(ENV_LOG_FORMAT, "logfmt").strip().lower() or "logfmt"
    if value not in ("logfmt", "json"):
        raise ConfigError(f"{ENV_LOG_FORMAT}: must be logfmt or json, got {value!r}")
    return value


def check_url(url: str, where: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{where}: must be an http(s) URL such as https://host[:port], got {url!r}"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ConfigError(f"{where}: bad port in {url!r}") from None


def check_template(template: str, where: str) -> None:
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    unknown = {f for f in fields if f not in ("session", "ttl")}
    if unknown or "" in fields:
        raise ConfigError(f"{where}: may use {{session}} and {{ttl}} only, got {template!r}")


def read_secret(
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
