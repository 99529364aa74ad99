"""deploy/compose and deploy/Dockerfile: no container engine here, so check they hang together.

The compose file is parsed and checked for its services, ports and volumes;
every file it mounts must exist, the worker config it mounts must load with
`worker.config` (secrets from the compose secrets), and the emulator, the
workers, Prometheus and Grafana must agree on names, ports and keys.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.worker.config import build_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
WORKERS = ("worker-1", "worker-2")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text()))


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """target -> source for the service's bind mounts (named volumes left out)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith((".", "/")):
            mounts[target] = (COMPOSE_DIR / source).resolve()
    return mounts


def flags(args: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for arg in args:
        name, _, value = arg.partition("=")
        found.setdefault(name, []).append(value)
    return found


def test_services_ports_and_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {
        "postgresql",
        "temporal",
        "temporal-admin-tools",
        "temporal-ui",
        "emulator",
        *WORKERS,
        "prometheus",
        "grafana",
    }
    published = {
        name: {int(p.split(":")[-2]) for p in s.get("ports", [])} for name, s in services.items()
    }
    assert published["temporal"] == {7233}
    assert published["temporal-ui"] == {8080}
    assert published["emulator"] == {8088}
    assert published["prometheus"] == {9090}
    assert published["grafana"] == {3000}
    assert not published["worker-1"] and not published["worker-2"]  # two replicas, no clash
    all_published = [p for s in services.values() for p in s.get("ports", [])]
    assert len(all_published) == len(set(all_published))

    assert services["temporal"]["environment"]["DB"].startswith("postgres")
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    for name, service in services.items():
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
    for worker in WORKERS:
        service = services[worker]
        assert service["depends_on"]["temporal-admin-tools"]["condition"] == (
            "service_completed_successfully"
        )
        assert service["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (COMPOSE_DIR / service["build"]["context"] / "deploy/Dockerfile").is_file()


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
    for name, secret in compose["secrets"].items():
        assert (COMPOSE_DIR / secret["file"]).is_file(), f"secret {name}"


def test_worker_config_loads_and_agrees_with_emulator(compose: dict[str, Any]) -> None:
    services = compose["services"]
    worker = services["worker-1"]
    assert services["worker-2"] == worker  # one anchor, two replicas
    config_path = worker["environment"]["DEVICEPOOL_CONFIG"]
    source = bind_mounts(worker)[config_path]

    # Compose mounts each secret at /run/secrets/<name>: load with those files.
    secret_files = {
        f"/run/secrets/{name}": (COMPOSE_DIR / compose["secrets"][name]["file"])
        for name in worker["secrets"]
    }
    data = yaml.safe_load(source.read_text())
    for account in data["accounts"].values():
        account["apiKeyFile"] = str(secret_files[account["apiKeyFile"]])
    config = build_config(data, source=str(source), env={})

    emulator = flags(services["emulator"]["command"])
    emulator_port = int(emulator["--port"][0])
    keys = dict(a.split("=", 1) for a in emulator["--account"])
    for account in config.accounts.values():
        url = urlsplit(account.base_url)
        assert (url.hostname, url.port) == ("emulator", emulator_port)
        assert keys[account.name] == account.api_key.get_secret_value()
        assert account.creates_per_minute == int(emulator["--creates-per-minute"][0])
    assert f"{emulator_port}:{emulator_port}" in services["emulator"]["ports"]

    # Prometheus scrapes exactly the workers, on the config's metrics port.
    prometheus = services["prometheus"]
    prom_mounts = bind_mounts(prometheus)
    prom_config_path = flags(prometheus["command"])["--config.file"][0]
    prom = yaml.safe_load(prom_mounts[prom_config_path].read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "devicepool-worker"]
    targets = {t for c in job["static_configs"] for t in c["targets"]}
    assert targets == {f"{w}:{config.metrics_port}" for w in WORKERS}
    assert job["metrics_path"] == "/metrics"
    for rule_file in prom["rule_files"]:
        assert rule_file in prom_mounts, f"rule file {rule_file} is not mounted"
        rules = yaml.safe_load(prom_mounts[rule_file].read_text())
        assert rules["groups"], rule_file


def test_grafana_provisions_the_datasource_and_dashboard(compose: dict[str, Any]) -> None:
    grafana = bind_mounts(compose["services"]["grafana"])
    provisioning = grafana["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources/prometheus.yaml").read_text())[
        "datasources"
    ]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus" and url.port == 9090
    assert "9090:9090" in compose["services"]["prometheus"]["ports"]
    (provider,) = yaml.safe_load((provisioning / "dashboards/devicepool.yaml").read_text())[
        "providers"
    ]
    dashboard_dir = provider["options"]["path"].rstrip("/")
    dashboards = [t for t in grafana if t.startswith(dashboard_dir + "/")]
    assert dashboards, f"nothing mounted under {dashboard_dir}"
    for target in dashboards:
        assert target.endswith(".json")
        assert yaml.safe_load(grafana[target].read_text())["panels"]  # JSON is YAML


def test_admin_tools_register_exactly_the_pool_search_attributes(
    compose: dict[str, Any],
) -> None:
    admin = compose["services"]["temporal-admin-tools"]
    script_target = admin["entrypoint"][-1]
    script = bind_mounts(admin)[script_target].read_text()
    registered = dict(re.findall(r"^\s+(DevicePool\w+)=(\w+)", script, re.MULTILINE))
    assert registered == SEARCH_ATTRIBUTES
    assert admin["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_dockerfile_builds_the_package_non_root_with_a_healthcheck() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # The one installed package and the layer folders its symlinks point at.
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"][0] == "devicepool"
    layers = {p.name for p in (ROOT / "devicepool").iterdir() if p.is_symlink()}
    packages = {"devicepool", *layers}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))
    assert copied == packages
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    assert {f"!{p}/" for p in packages} <= set(ignore)
    assert {"!pyproject.toml", "!README.md"} <= set(ignore)

    bases = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    pinned = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+\.\d+)-slim", dockerfile, re.MULTILINE)
    assert pinned and bases[-1] == "${PYTHON_IMAGE}"
    assert "--no-index" in dockerfile  # the runtime stage installs the built wheels only
    user = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    healthcheck = dockerfile.split("HEALTHCHECK", 1)[1].split("\n\n")[0]
    assert "/healthz" in healthcheck and "9464" in healthcheck
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.MULTILINE)
    assert entrypoint and yaml.safe_load(entrypoint[1]) == ["devicepool", "worker"]
    assert pyproject["project"]["scripts"]["devicepool"] == "devicepool.client.cli:main"
